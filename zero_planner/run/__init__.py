"""Running a plan: zero-run's checks before launch, the one place processes are spawned, the training loop on
every rank and what it reads and writes. Imports only from below (the plan file, plan/, models/, the shared
modules at the top); the command lines that start it are the entry modules above (zero_planner/launch.py,
train.py, probe.py).

    preflight.py   can this machine run the plan                       launcher.py    runnable argv, spawn
    probe.py       --probe: measure the top candidates                 slurm.py       --slurm's sbatch script
    train.py       the training loop, as named steps                   modeling.py    the Hugging Face model
    data.py        datasets: load, tokenize, pack, shard               tokenizer.py   the tokenizers
    training_args.py  data, weights and hyperparameter flags           checkpoint.py  checkpoints on disk
    fingerprint.py    what the ranks must agree on                     meter.py       memory per phase
    report.py      run_report.json and its tables                      report_page.py run_report.html
"""
