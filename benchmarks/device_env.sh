# Sourced by the GPU scripts (device tool), from the repository root: installs the carried wheels (.whl, and
# .whl/data and .whl/hf where carried) into /tmp/site in one pip call (pip --target replaces bin/ on every call), sets what
# every run there needs (NVLink multicast off, unbuffered Python), and unpacks the carried DeepSpeed op builds
# (.dsext) and bitsandbytes (.bnb). TORCH_CUDA_ARCH_LIST is left as the machine sets it: a script that needs it
# pinned sets it after sourcing this.
wheels=(.whl/*.whl)
if [ -d .whl/data ]; then wheels+=(.whl/data/*.whl); fi
if [ -d .whl/hf ]; then wheels+=(.whl/hf/*.whl); fi  # transformers, peft, ... at constraints.txt's versions
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${wheels[@]}" || exit 1
export PATH=/tmp/site/bin:$PATH PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
if [ -d .bnb ]; then export PYTHONPATH=$PWD/.bnb:$PYTHONPATH; fi  # bitsandbytes, unpacked (qlora cases)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TORCH_EXTENSIONS_DIR=/tmp/dsext
mkdir -p $TORCH_EXTENSIONS_DIR
if [ -f .dsext/dsext.tgz.aa ]; then cat .dsext/dsext.tgz.* | tar -xz -C $TORCH_EXTENSIONS_DIR; fi
