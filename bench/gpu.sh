#!/usr/bin/env bash
# vktrain beside PyTorch on the same CUDA GPU: fp32 GEMM (square, and the char LM's
# transposed weight-gradient shapes), the MLP step at batch 128 and 1024, the MNIST loop,
# a wide MLP, the CNN at batch 64 and 512 (also with conv_im2col forced, the convolution
# conv_implicit replaced on GPUs), and the char LM at its default shape and at
# width 384 / 6 layers / 6 heads / context 256 / batch 64. Prints one table (the one in
# docs/performance.md), the card named; every command's output is kept in $OUT (default a
# temporary folder).
#
# Usage: bench/gpu.sh [--cpu] [--dry-run] [--debs DIR] [BIN_DIR]
#   BIN_DIR    the folder holding vkt (default: build); data from BIN_DIR/../data if it
#              has one (a prepared .gpu/ folder), else the repository's data/
#   --cpu      no GPU needed: the same steps, small, vktrain on its Vulkan device
#              (lavapipe) and PyTorch on the CPU. A check of the script, not figures.
#   --dry-run  print the commands, run nothing
#   --debs DIR unpack the Vulkan loader and glvnd .deb files of DIR first (dpkg -x into /,
#              as root): what ../shared/gpu/prepare.sh puts in .gpu/debs
# PYTHON: the interpreter with PyTorch (default python3; /usr/bin/python3 with --cpu,
# Debian's python3-torch: scripts/install-deps.sh --bench). Exit status: 0 when every
# figure ran, 1 when some failed (shown as "failed" in the table), 2 for usage or no GPU.
#
# On a machine lent for GPU runs (../shared/gpu/README.md): from the project root,
#   ../shared/gpu/prepare.sh && cp bench/gpu.sh bench/gpu_torch.py .gpu/
# then on the GPU machine, from the folder that holds .gpu/:
#   bash .gpu/gpu.sh --debs .gpu/debs .gpu/bin
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cpu=0 dry=0 debs="" bin=""
while (($#)); do
  case $1 in
    --cpu) cpu=1 ;;
    --dry-run) dry=1 ;;
    --debs) debs=${2:-}; shift ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "bench/gpu.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) bin=$1 ;;
  esac
  shift
done
bin=${bin:-$here/../build}
vkt=$bin/vkt
torch_py=$here/gpu_torch.py
py=${PYTHON:-$( ((cpu)) && echo /usr/bin/python3 || echo python3)}
if [[ -d $bin/../data/mnist ]]; then data=$(cd "$bin/../data" && pwd); else data=$here/../data; fi
text=$data/austen/pride_and_prejudice.txt
export VKT_DATA_DIR=$data/mnist
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"

fail() { echo "bench/gpu.sh: $*" >&2; exit 2; }
[[ -x $vkt ]] || fail "no vkt in '$bin' (build it: cmake --build build; or name the folder)"
[[ -f $torch_py ]] || fail "gpu_torch.py is not beside gpu.sh ($here)"
[[ -n $debs && ! -d $debs ]] && fail "--debs: '$debs' is not a folder"

# The NVIDIA Vulkan driver: its loader and glvnd from .deb files where the image lacks
# them (the ICD returns no instance without glvnd), and its ICD file.
if [[ -n $debs && $dry == 0 ]]; then
  for f in "$debs"/lib*.deb; do dpkg -x "$f" / || fail "dpkg -x $f failed (root needed)"; done
  ldconfig
fi
if [[ -z ${VK_DRIVER_FILES:-} && $cpu == 0 ]]; then
  for j in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json \
           /etc/vulkan/icd.d/nvidia_icd.json; do
    if [[ -f $j ]]; then
      export VK_DRIVER_FILES=$j
      egl=${j%/vulkan/icd.d/*}/glvnd/egl_vendor.d/10_nvidia.json
      [[ -f $egl ]] && export __EGL_VENDOR_LIBRARY_FILENAMES=$egl
      break
    fi
  done
fi

# ---- the machine: a CUDA GPU for PyTorch, the same GPU for vktrain --------------------
if ((cpu)); then
  sizes=256,512 min_s=0.1 shapes="2048,64,64,0,0 64,192,2048,1,0 2048,192,64,0,1"
  bsteps="--steps 10 --warmup 2" loop_steps=50 cnn64=10 cnn512=3 lm_steps=10
  targs="--device cpu --quick"
elif ((dry)); then
  :
else
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU' ||
    fail "no CUDA GPU on this machine (nvidia-smi lists none). This compares vktrain with" \
         "PyTorch on one NVIDIA GPU; --cpu runs the same steps small on the CPU to check the" \
         "script, --dry-run prints the commands."
  "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
    fail "$py has no PyTorch with CUDA (import torch; torch.cuda.is_available()); set PYTHON"
fi
if ((!cpu)); then
  sizes=1024,2048,4096,8192 min_s=0.5
  shapes="2048,64,64,0,0 64,192,2048,1,0 2048,192,64,0,1 16384,1536,384,0,0 384,1536,16384,1,0 16384,384,1536,0,1"
  bsteps="" loop_steps=0 cnn64=300 cnn512=100 lm_steps=300
  targs="--device cuda"
fi
if ((!dry)); then
  dev=$("$vkt" devices 2>&1) || fail "vkt devices failed: $dev"
  vk_name=$(sed -n 's/^device 0: //p' <<<"$dev" | head -1)
  vk_type=$(awk '/^  type / { print $2; exit }' <<<"$dev")
  ((cpu)) || [[ $vk_type != cpu ]] ||
    fail "vkt sees no GPU through Vulkan (device 0 is '$vk_name', type cpu): set" \
         "VK_DRIVER_FILES to the NVIDIA ICD's nvidia_icd.json (and --debs for its loader)"
fi

# ---- the runs ------------------------------------------------------------------------
failed=0
run() { # name timeout_s command...: output into $out/name.txt
  local name=$1 t=$2
  shift 2
  if ((dry)); then # the command as a shell would take it back
    local a line=""
    for a in "$@"; do
      if [[ $a =~ ^[A-Za-z0-9_./,=:+-]+$ ]]; then line+="$a "; else line+="'${a//\'/\'\\\'\'}' "; fi
    done
    echo "${line% }"
    return 0
  fi
  echo "== $name: $*" >&2
  timeout "$t" "$@" >"$out/$name.txt" 2>&1 || { echo "   (failed: exit $?)" >&2; failed=1; }
}
ts=$(date +%s)
run vk_gemm 200 "$vkt" bench gemm --sizes "$sizes" --min-seconds "$min_s"
for t in bf16 fp16; do # A and B 16-bit, fp32 accumulation (issue 22: 300 TFLOP/s at 8192)
  run "vk_gemm_$t" 200 "$vkt" bench gemm --dtype "$t" --sizes "$sizes" --min-seconds "$min_s"
done
for s in $shapes; do run "vk_shape_${s//,/_}" 60 "$vkt" bench gemm --shape "$s,0" --min-seconds 0.2; done
run vk_step128 120 "$vkt" bench train $bsteps
run vk_step1024 120 "$vkt" bench train --batch 1024 $bsteps
lp() { ((loop_steps)) && echo "--steps $loop_steps"; }
run vk_loop128 180 "$vkt" train --quiet $(lp)
run vk_loop1024 180 "$vkt" train --quiet --batch 1024 $(lp)
((cpu)) || run vk_mlp4096 180 "$vkt" train --quiet --hidden 4096,4096 --batch 1024 --steps 100 --lr 0.05
run vk_cnn64 180 "$vkt" train --model cnn --quiet --batch 64 --steps "$cnn64"
run vk_cnn512 180 "$vkt" train --model cnn --quiet --batch 512 --steps "$cnn512"
# the same with the GPU's convolution before conv_implicit: im2col + gemm_tile + col2im
for b in 64 512; do
  steps=$cnn64; ((b == 512)) && steps=$cnn512
  ((cpu)) || run "vk_cnn${b}_im2col" 180 env VKT_KERNELS=gpu,conv_im2col "$vkt" train \
    --model cnn --quiet --batch "$b" --steps "$steps"
done
run vk_lm 180 "$vkt" train --model charlm --steps "$lm_steps" --eval-every 0 --sample 0 --quiet \
  --text "$text"
((cpu)) || run vk_lm384 240 "$vkt" train --model charlm --width 384 --layers 6 --heads 6 \
  --context 256 --batch 64 --steps 40 --eval-every 0 --sample 0 --quiet --text "$text"
run torch 900 env GEMM_SHAPES="$shapes" "$py" "$torch_py" $targs --data "$data/mnist" --text "$text"
((dry)) && exit 0

# ---- the table -----------------------------------------------------------------------
# key=value of the last line of file $1 that matches $2 (a regular expression)
val() { grep -E "$2" "$out/$1.txt" 2>/dev/null | tail -1 | sed -n "s/.* $3=\([^ ]*\).*/\1/p"; }
rate() { val "$1" '^result:' samples_per_s; }
ms_per_step() { # samples/s and batch -> ms per step
  awk -v r="$1" -v b="$2" 'BEGIN { if (r > 0) printf "%.3f", b * 1000 / r }'; }
fmt() { [[ -n $1 ]] && echo "$1" || echo "failed"; }
ratio() { # a b [inverse]: a / b (b / a with inverse); "" when either is missing
  awk -v a="$1" -v b="$2" -v inv="${3:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", inv ? b / a : a / b }'; }
row() { printf '| %s | %s | %s | %s |\n' "$1" "$(fmt "$2")" "$(fmt "$3")" "${4:--}"; }
g3() { # 3 significant digits, whole numbers from 1000 on
  awk -v x="$1" 'BEGIN { if (x != "") printf (x >= 1000 ? "%.0f" : "%.3g"), x }'; }
gpu=$( ((cpu)) && echo "CPU ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))" ||
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
echo
echo "vktrain $(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo '(no git)') on" \
  "'$vk_name'${VKT_MEMORY_PROFILE:+ (VKT_MEMORY_PROFILE=$VKT_MEMORY_PROFILE)}${VKT_KERNELS:+ (VKT_KERNELS=$VKT_KERNELS)};" \
  "PyTorch $(val torch '^torch: version' version) on $gpu; $(($(date +%s) - ts)) s"
((cpu)) && echo "(--cpu: lavapipe and PyTorch on the CPU, small sizes: a check of the script, not figures)"
echo
echo "| work | vktrain | PyTorch | speed vs PyTorch |"
echo "|---|---|---|---|"
for n in ${sizes//,/ }; do
  v=$(g3 "$(awk -v n="$n" '$1 == n && $NF == "ok" { print $3 / 1000 }' "$out/vk_gemm.txt" 2>/dev/null)")
  t=$(g3 "$(val torch "^torch: gemm n=$n " best_tflops)")
  row "GEMM $n fp32 (TFLOP/s)" "$v" "$t" "$(ratio "$v" "$t")"
done
((cpu)) || row "GEMM 8192, TF32 tensor cores (TFLOP/s)" "-" "$(val torch '^torch: gemm_tf32' best_tflops)"
for t in bf16 fp16; do # vktrain alone: compare with the issue's cuBLAS figure (about 790 in bf16)
  for n in ${sizes//,/ }; do
    v=$(g3 "$(awk -v n="$n" '$1 == n && $NF == "ok" { print $3 / 1000 }' "$out/vk_gemm_$t.txt" 2>/dev/null)")
    row "GEMM $n, A and B $t, fp32 accumulation (TFLOP/s)" "$v" "-"
  done
done
for s in $shapes; do
  IFS=, read -r m n k ta tb <<<"$s"
  v=$(g3 "$(awk '$1 == "shape" && $NF == "ok" { print $(NF-2) / 1000 }' "$out/vk_shape_${s//,/_}.txt" 2>/dev/null)")
  t=$(g3 "$(val torch "^torch: gemm_shape shape=$s " best_tflops)")
  row "GEMM ${m}x${n}, K=$k$( ((ta)) && echo ', A transposed')$( ((tb)) && echo ', B transposed') (TFLOP/s)" \
    "$v" "$t" "$(ratio "$v" "$t")"
done
for b in 128 1024; do
  v=$(val "vk_step$b" '^result:' step_ms); t=$(val torch "^torch: mlp_step batch=$b " best_ms)
  row "MLP 784-256-128-10 step, batch $b (best ms)" "$v" "$t" "$(ratio "$v" "$t" 1)"
done
for b in 128 1024; do
  v=$(g3 "$(rate "vk_loop$b")"); t=$(g3 "$(val torch "^torch: mlp_data_loop batch=$b " samples_per_s)")
  row "MNIST loop, batch $b (samples/s)" "$v" "$t" "$(ratio "$v" "$t")"
done
if ((!cpu)); then
  v=$(g3 "$(rate vk_mlp4096)")
  t=$(g3 "$(awk -v m="$(val torch '^torch: mlp4096_step' best_ms)" 'BEGIN { if (m > 0) print 1024000 / m }')")
  row "MLP 784-4096-4096-10, batch 1024 (samples/s)" "$v" "$t" "$(ratio "$v" "$t")"
fi
for b in 64 512; do
  v=$(ms_per_step "$(rate "vk_cnn$b")" "$b"); t=$(val torch "^torch: cnn_step batch=$b " median_ms)
  row "CNN step, batch $b (ms; vktrain: vkt train's loop)" "$v" "$t" "$(ratio "$v" "$t" 1)"
  ((cpu)) && continue
  v=$(ms_per_step "$(rate "vk_cnn${b}_im2col")" "$b")
  row "same, conv_im2col forced (VKT_KERNELS=gpu,conv_im2col)" "$v" "$t" "$(ratio "$v" "$t" 1)"
done
v=$(ms_per_step "$(rate vk_lm)" 32); t=$(val torch '^torch: charlm precision=fp32 width=64 ' median_ms)
row "char LM, width 64, 2 layers, context 64, batch 32 (ms per step)" "$v" "$t" "$(ratio "$v" "$t" 1)"
if ((!cpu)); then
  v=$(ms_per_step "$(rate vk_lm384)" 64)
  t=$(val torch '^torch: charlm precision=fp32 width=384 ' median_ms)
  row "char LM, width 384, 6 layers, 6 heads, context 256, batch 64 (ms per step)" "$v" "$t" \
    "$(ratio "$v" "$t" 1)"
  t=$(val torch '^torch: charlm precision=bf16-autocast width=384 ' median_ms)
  row "same, PyTorch with bf16 autocast (ms per step)" "$v" "$t" "$(ratio "$v" "$t" 1)"
fi
echo
echo "speed vs PyTorch: above 1, vktrain is faster. vktrain's loops (MNIST, CNN, char LM) are"
echo "vkt train's samples/s over its training steps; PyTorch's steps use batches already on the"
echo "device (median ms). GEMM: best of repeated runs. Outputs: $out"
exit $failed
