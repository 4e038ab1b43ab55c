#!/usr/bin/env bash
# vktrain beside PyTorch on the same CUDA GPU: every target of issue 20 and the figures
# around them. fp32 GEMM at 1024 to 8192 (and 16-bit inputs); every GEMM of a training
# step of the MLP at batch 1024 and of the char LM at width 384 / 6 layers / 6 heads /
# context 256 / batch 64, each beside torch.mm on the same shape and transposes; the MLP
# step at batch 128 and 1024, the MNIST loop, a wide MLP; the CNN at batch 64 and 512 (and
# with conv_im2col forced, the convolution conv_implicit replaced on GPUs); the char LM at
# its default shape and at the shape above; causal attention forward + backward at
# contexts up to 2048 and head sizes 32 to 128 beside PyTorch's scaled_dot_product_attention.
# Issue 21's targets: the MLP with device 0 listed twice (VKT_DEVICES=0,0), 2 sync replicas
# at batch 1024 and 128, 2 async replicas and 2 pipeline stages x 4 micro-batches at 1024,
# each beside one replica at the same batch and steps (vkt train), and the exposed
# averaging of 2 sync replicas (vkt bench parallel); host pipeline edges and the replicas
# forced onto one VkDevice or one each beside them.
# Prints one table of figures, one of issue 21's parallel runs and one of the targets,
# each with pass or FAIL, the card named; all are also written to $OUT/table.md, and every
# command's output is kept in $OUT (default a temporary folder).
#
# Usage: bench/gpu.sh [--cpu] [--dry-run] [--debs DIR] [--limit S] [BIN_DIR]
#        bench/gpu.sh --table DIR
#   BIN_DIR    the folder holding vkt (default: build); data from BIN_DIR/../data if it
#              has one (a prepared .gpu/ folder), else the repository's data/
#   --cpu      no GPU needed: the same steps, small, vktrain on its Vulkan device
#              (lavapipe) and PyTorch on the CPU. A check of the script, not figures.
#   --dry-run  print the commands, run nothing
#   --debs DIR unpack the Vulkan loader and glvnd .deb files of DIR first (dpkg -x into /,
#              as root): what ../shared/gpu/prepare.sh puts in .gpu/debs
#   --limit S  finish within S seconds: the target figures run first, each command's
#              timeout is cut to the time left, and what no longer fits is skipped (shown
#              as "skipped"); the tables are printed whatever ran
#   --table DIR  print the tables again from the outputs of an earlier run kept in DIR
# PYTHON: the interpreter with PyTorch (default python3; /usr/bin/python3 with --cpu,
# Debian's python3-torch: scripts/install-deps.sh --bench). Exit status: 0 when every
# figure ran, 1 when some failed or were skipped (shown in the table), 2 for usage or no
# GPU. The targets' pass or FAIL does not change it: the table and the line
# "result: targets pass=P fail=F unmeasured=U" say it.
#
# On a machine lent for GPU runs (../shared/gpu/README.md): bench/gpu_prepare.sh fills .gpu/,
# then on the GPU machine, from the folder that holds .gpu/ (docs/performance.md):
#   bash .gpu/gpu.sh --debs .gpu/debs --limit 480 .gpu/bin
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cpu=0 dry=0 debs="" bin="" limit=0 table=""
usage_fail() { echo "bench/gpu.sh: $*" >&2; exit 2; }
while (($#)); do
  case $1 in
    --cpu) cpu=1 ;;
    --dry-run) dry=1 ;;
    --debs) [[ $# -ge 2 ]] || usage_fail "--debs takes a folder"; debs=$2; shift ;;
    --limit) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || usage_fail "--limit takes whole seconds, such as 540"
             limit=$2; shift ;;
    --table) [[ $# -ge 2 ]] || usage_fail "--table takes the folder of an earlier run"
             table=$2; shift ;;
    -h|--help) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) usage_fail "unknown option '$1' (see --help)" ;;
    *) bin=$1 ;;
  esac
  shift
done
fail() { echo "bench/gpu.sh: $*" >&2; exit 2; }

# ---- what runs: the lists the runs and the tables share --------------------------------
# linear ROWS IN OUT [first]: the GEMMs of a linear layer's training step, as
# M,N,K,trans_a,trans_b: Y = X W, dW = X^T dY, and dX = dY W^T unless it is the first
# layer (its input, the data, needs no gradient)
linear() {
  echo "$1,$3,$2,0,0 $2,$3,$1,1,0"
  [[ ${4:-} == first ]] || echo "$1,$2,$3,0,1"
}
set_lists() { # from cpu and vocab
  local r c
  if ((cpu)); then
    sizes=256,512 min_s=0.1 bsteps="--steps 10 --warmup 2" loop_steps=50 cnn64=10 cnn512=3
    lm_steps=10 targs="--device cpu --quick"
    lm_rows=512 lm_c=64        # a small stand-in for the char LM's products
    attn="64,32,2,2"           # context,head size,batch,heads
    par1024=4 par128=10 pbench="--steps 3 --warmup 1 --rounds 1"
  else
    sizes=1024,2048,4096,8192 min_s=0.5 bsteps="" loop_steps=0 cnn64=300 cnn512=100
    lm_steps=300 targs="--device cuda"
    lm_rows=$((64 * 256)) lm_c=384
    attn="256,64,64,4 1024,64,16,4 2048,32,8,4 2048,64,8,4 2048,128,8,4"
    par1024=500 par128=2000 pbench="--steps 100 --warmup 10 --rounds 1"
  fi
  # the MLP 784-256-128-10 at batch 1024: 8 GEMMs a step
  mlp_shapes=$(echo $(linear 1024 784 256 first; linear 1024 256 128; linear 1024 128 10))
  # the char LM: every block's qkv, attention projection, MLP in and out; the head
  r=$lm_rows c=$lm_c
  lm_shapes=$(echo $(linear $r $c $((3 * c)); linear $r $c $c; linear $r $c $((4 * c))
    linear $r $((4 * c)) $c; linear $r $c "$vocab"))
  # the char LM at its default shape (width 64, context 64, batch 32): three of its products
  lm64_shapes="2048,64,64,0,0 64,192,2048,1,0 2048,192,64,0,1"
}

if [[ -n $table ]]; then # the tables of an earlier run
  [[ -f $table/run.env ]] || fail "--table: '$table' holds no run of bench/gpu.sh (no run.env)"
  out=$table
  . "$out/run.env"
  set_lists
else
  bin=${bin:-$here/../build}
  vkt=$bin/vkt
  torch_py=$here/gpu_torch.py
  py=${PYTHON:-$( ((cpu)) && echo /usr/bin/python3 || echo python3)}
  if [[ -d $bin/../data/mnist ]]; then data=$(cd "$bin/../data" && pwd); else data=$here/../data; fi
  text=$data/austen/pride_and_prejudice.txt
  export VKT_DATA_DIR=$data/mnist
  out=${OUT:-$(mktemp -d)}
  mkdir -p "$out"
  [[ -x $vkt ]] || fail "no vkt in '$bin' (build it: cmake --build build; or name the folder)"
  [[ -f $torch_py ]] || fail "gpu_torch.py is not beside gpu.sh ($here)"
  [[ -n $debs && ! -d $debs ]] && fail "--debs: '$debs' is not a folder"
  [[ -f $text ]] || fail "no text for the char LM at '$text'"
  # the char LM's vocabulary: the text's distinct bytes, as vkt train counts them
  vocab=$(od -An -v -tu1 "$text" | tr -s ' ' '\n' | grep . | sort -un | wc -l)
  [[ $vocab =~ ^[1-9][0-9]*$ ]] || fail "cannot count the characters of '$text'"
  set_lists

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

  # ---- the machine: a CUDA GPU for PyTorch, the same GPU for vktrain ------------------
  if ((!cpu && !dry)); then
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU' ||
      fail "no CUDA GPU on this machine (nvidia-smi lists none). This compares vktrain with" \
           "PyTorch on one NVIDIA GPU; --cpu runs the same steps small on the CPU to check the" \
           "script, --dry-run prints the commands."
    "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
      fail "$py has no PyTorch with CUDA (import torch; torch.cuda.is_available()); set PYTHON"
  fi
  if ((!dry)); then
    dev=$("$vkt" devices 2>&1) || fail "vkt devices failed: $dev"
    vk_type=$(awk '/^  type / { print $2; exit }' <<<"$dev")
    ((cpu)) || [[ $vk_type != cpu ]] ||
      fail "vkt sees no GPU through Vulkan (device 0 is '$(sed -n 's/^device 0: //p' <<<"$dev" | head -1)'," \
           "type cpu): set VK_DRIVER_FILES to the NVIDIA ICD's nvidia_icd.json (and --debs for its loader)"
    echo "$dev" >"$out/devices.txt"
    gpu=$( ((cpu)) && echo "CPU ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))" ||
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
    commit=$(cat "$bin/../commit" 2>/dev/null || git -C "$here/.." describe --always --dirty 2>/dev/null ||
      echo '(no git)') # bench/gpu_prepare.sh writes .gpu/commit
    printf 'cpu=%q\nvocab=%q\ngpu=%q\ncommit=%q\nenv_note=%q\n' "$cpu" "$vocab" "$gpu" "$commit" \
      "${VKT_MEMORY_PROFILE:+ (VKT_MEMORY_PROFILE=$VKT_MEMORY_PROFILE)}${VKT_KERNELS:+ (VKT_KERNELS=$VKT_KERNELS)}" \
      >"$out/run.env"
    . "$out/run.env"
    rm -f "$out/skipped"
  fi

  # ---- the runs -----------------------------------------------------------------------
  failed=0 t_start=$SECONDS
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
    if ((limit)); then # what is left of --limit, less 10 s for the tables
      local left=$((limit - (SECONDS - t_start) - 10))
      if ((left < 5)); then
        echo "== $name: skipped (--limit $limit)" >&2
        echo "$name" >>"$out/skipped"
        failed=1
        return 0
      fi
      ((t > left)) && t=$left
    fi
    echo "== $name: $*" >&2
    timeout "$t" "$@" >"$out/$name.txt" 2>&1 || { echo "   (failed: exit $?)" >&2; failed=1; }
  }
  shape_args() { local s; for s in $1; do echo "--shape $s,0"; done; }
  lp() { ((loop_steps)) && echo "--steps $loop_steps"; }
  attn_run() { # context,head size,batch,heads: a 1-layer char LM, the attention op's row
    local t d b h
    IFS=, read -r t d b h <<<"$1"
    run "vk_attn_${t}_$d" 120 "$vkt" bench layers --model charlm --layers 1 --width $((h * d)) \
      --heads "$h" --context "$t" --batch "$b" --runs 3 --steps 2
  }
  # the targets first (--limit skips from the end)
  run vk_gemm 200 "$vkt" bench gemm --sizes "$sizes" --min-seconds "$min_s"
  run vk_gemms_mlp1024 120 "$vkt" bench gemm $(shape_args "$mlp_shapes") --min-seconds 0.2
  run vk_gemms_lm 180 "$vkt" bench gemm $(shape_args "$lm_shapes") --min-seconds 0.2
  run vk_step128 120 "$vkt" bench train $bsteps
  run vk_cnn64 180 "$vkt" train --model cnn --quiet --batch 64 --steps "$cnn64"
  run vk_cnn512 180 "$vkt" train --model cnn --quiet --batch 512 --steps "$cnn512"
  run vk_lm 180 "$vkt" train --model charlm --steps "$lm_steps" --eval-every 0 --sample 0 --quiet \
    --text "$text"
  ((cpu)) || run vk_lm384 240 "$vkt" train --model charlm --width 384 --layers 6 --heads 6 \
    --context 256 --batch 64 --steps 40 --eval-every 0 --sample 0 --quiet --text "$text"
  for a in $attn; do attn_run "$a"; done
  run torch 900 env GEMM_SHAPES="$mlp_shapes $lm_shapes $lm64_shapes" ATTN_SHAPES="$attn" \
    "$py" "$torch_py" $targs --data "$data/mnist" --text "$text"
  # issue 21: the MLP with device 0 listed twice, beside one replica at the same batch and
  # steps; the exposed averaging from vkt bench parallel at batch 1024
  for b in 1024 128; do
    steps=$par1024; ((b == 128)) && steps=$par128
    run "par_one_$b" 60 env VKT_DEVICES=0 "$vkt" train --quiet --batch "$b" --steps "$steps"
    run "par_sync2_$b" 60 env VKT_DEVICES=0,0 "$vkt" train --quiet --batch "$b" --steps "$steps" \
      --replicas 2 --mode sync
  done
  run par_async2_1024 60 env VKT_DEVICES=0,0 "$vkt" train --quiet --batch 1024 --steps "$par1024" \
    --replicas 2 --mode async
  run par_pipe2_1024 60 env VKT_DEVICES=0,0 "$vkt" train --quiet --batch 1024 --steps "$par1024" \
    --pipeline 2 --micro-batches 4
  run par_bench1024 120 "$vkt" bench parallel --batch 1024 $pbench
  # the figures around them
  run vk_step1024 120 "$vkt" bench train --batch 1024 $bsteps
  run vk_gemms_lm64 60 "$vkt" bench gemm $(shape_args "$lm64_shapes") --min-seconds 0.2
  for t in bf16 fp16; do # A and B 16-bit, fp32 accumulation (issue 22: 300 TFLOP/s at 8192)
    run "vk_gemm_$t" 200 "$vkt" bench gemm --dtype "$t" --sizes "$sizes" --min-seconds "$min_s"
  done
  run vk_loop128 180 "$vkt" train --quiet $(lp)
  run vk_loop1024 180 "$vkt" train --quiet --batch 1024 $(lp)
  # issue 21's other paths: the stages' values through the host; the replicas forced onto
  # one VkDevice (the device reducer) and onto one each (the host reducer)
  run par_pipe2_1024_host 60 env VKT_PIPE_EDGES=host VKT_DEVICES=0,0 "$vkt" train --quiet \
    --batch 1024 --steps "$par1024" --pipeline 2 --micro-batches 4
  for v in 1 0; do
    run "par_sync2_1024_share$v" 60 env VKT_SHARE_DEVICE=$v VKT_DEVICES=0,0 "$vkt" train --quiet \
      --batch 1024 --steps "$par1024" --replicas 2 --mode sync
  done
  ((cpu)) || run vk_mlp4096 180 "$vkt" train --quiet --hidden 4096,4096 --batch 1024 --steps 100 --lr 0.05
  # the CNN with the GPU's convolution before conv_implicit: im2col + gemm_tile + col2im
  for b in 64 512; do
    steps=$cnn64; ((b == 512)) && steps=$cnn512
    ((cpu)) || run "vk_cnn${b}_im2col" 180 env VKT_KERNELS=gpu,conv_im2col "$vkt" train \
      --model cnn --quiet --batch "$b" --steps "$steps"
  done
  ((dry)) && exit 0
  echo "$(($SECONDS - t_start))" >"$out/seconds"
fi

# ---- the tables ------------------------------------------------------------------------
# key=value of the last line of file $1 that matches $2 (a regular expression)
val() { grep -E "$2" "$out/$1.txt" 2>/dev/null | tail -1 | sed -n "s/.* $3=\([^ ]*\).*/\1/p"; }
rate() { val "$1" '^result:' samples_per_s; }
ms_per_step() { # samples/s and batch -> ms per step
  awk -v r="$1" -v b="$2" 'BEGIN { if (r > 0) printf "%.3f", b * 1000 / r }'; }
skipped() { grep -qx "$1" "$out/skipped" 2>/dev/null; }
fmt() { # figure [run name]: the figure, or why there is none
  if [[ -n $1 ]]; then echo "$1"; elif [[ -n ${2:-} ]] && skipped "$2"; then echo "skipped"
  else echo "failed"; fi; }
ratio() { # a b [inverse]: a / b (b / a with inverse); "" when either is missing
  awk -v a="$1" -v b="$2" -v inv="${3:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", inv ? b / a : a / b }'; }
row() { printf '| %s | %s | %s | %s |\n' "$1" "$(fmt "$2" "${5:-}")" "$(fmt "$3" "${6:-}")" "${4:--}"; }
g3() { # 3 significant digits, whole numbers from 1000 on
  awk -v x="$1" 'BEGIN { if (x != "") printf (x >= 1000 ? "%.0f" : "%.3g"), x }'; }
# vktrain's TFLOP/s for shape M,N,K,ta,tb from a `vkt bench gemm --shape` output
vk_shape() {
  local m n k ta tb
  IFS=, read -r m n k ta tb <<<"$2"
  awk -v m="$m" -v n="$n" -v k="$k" -v ta="$ta" -v tb="$tb" \
    '$1 == "shape" && $2 == ta && $3 == tb && $4 == m && $5 == n && $6 == k && $NF == "ok" {
       print $(NF-2) / 1000; exit }' "$out/$1.txt" 2>/dev/null; }
torch_shape() { val torch "^torch: gemm_shape shape=$1 " best_tflops; }
shape_label() {
  local m n k ta tb
  IFS=, read -r m n k ta tb <<<"$1"
  echo "${m}x${n}, K=$k$( ((ta)) && echo ', A transposed')$( ((tb)) && echo ', B transposed')"; }
# vktrain's attention: forward + backward device ms of the causal_attention row
vk_attn() {
  awk '$1 == "causal_attention" { print $3 + $4; exit }' "$out/vk_attn_$1.txt" 2>/dev/null; }
torch_attn() { val torch "^torch: attention shape=$1 " fwdbwd_ms; } # context,head size,batch,heads

# targets: one row each, collected while the figures are printed
targets="" n_pass=0 n_fail=0 n_none=0
target() { # name needed measured verdict(pass|FAIL|"")
  local v=${4:-not measured}
  case $v in pass) n_pass=$((n_pass + 1)) ;; FAIL) n_fail=$((n_fail + 1)) ;; *) n_none=$((n_none + 1)) ;; esac
  targets+="| $1 | $2 | ${3:--} | $v |"$'\n'
}
at_least() { # ratio minimum -> pass, FAIL or ""
  awk -v r="$1" -v m="$2" 'BEGIN { if (r != "") print (r + 0 >= m + 0 ? "pass" : "FAIL") }'; }
at_most() { # figure maximum -> pass, FAIL or ""
  awk -v r="$1" -v m="$2" 'BEGIN { if (r != "") print (r + 0 <= m + 0 ? "pass" : "FAIL") }'; }
# vkt bench parallel's 2 sync replicas: "exposed_ms step_ms reducer" of table 1 (a VkDevice
# each: the host reducer) or, with shared, of table 4's row sharing one VkDevice
par_exposed() {
  if [[ ${1:-} == shared ]]; then
    awk '/^4\. / { s = 1 } /^5\. / { s = 0 }
         s && $1 == "shared" && $2 == 2 { print $8, $5, $3; exit }' "$out/par_bench1024.txt" 2>/dev/null
  else
    awk '$1 == "sync" && $2 == 2 && NF >= 11 { print $11, $5, "host"; exit }' "$out/par_bench1024.txt" 2>/dev/null
  fi; }
percent() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b > 0) printf "%.1f", 100 * a / b }'; }
# issue 21's runs: one table of samples/s beside one replica, and the targets
print_parallel() {
  local r e m red p what s1024="" s128="" a1024="" p1024="" x="" xd=""
  echo
  echo "| MLP 784-256-128-10, device 0 listed twice (VKT_DEVICES=0,0; vkt train) | samples/s | vs one replica, same batch and steps |"
  echo "|---|---|---|"
  par_row() { # label, run, the one replica's run: prints the row, sets r
    r=$(ratio "$(rate "$2")" "$(rate "$3")")
    printf '| %s | %s | %s |\n' "$1" "$(fmt "$(g3 "$(rate "$2")")" "$2")" "$([[ -n $r ]] && echo "${r}x" || echo -)"
  }
  par_row "one replica (VKT_DEVICES=0), batch 1024" par_one_1024 par_one_1024
  par_row "2 sync replicas, batch 1024" par_sync2_1024 par_one_1024; s1024=$r
  par_row "same, VKT_SHARE_DEVICE=1 (one VkDevice: the device reducer)" par_sync2_1024_share1 par_one_1024
  par_row "same, VKT_SHARE_DEVICE=0 (a VkDevice each: the host reducer)" par_sync2_1024_share0 par_one_1024
  par_row "2 async replicas, batch 1024" par_async2_1024 par_one_1024; a1024=$r
  par_row "2 pipeline stages x 4 micro-batches, batch 1024 (edges as the device allows)" par_pipe2_1024 par_one_1024
  p1024=$r
  par_row "same, VKT_PIPE_EDGES=host (values cross the stages through the host)" par_pipe2_1024_host par_one_1024
  par_row "one replica (VKT_DEVICES=0), batch 128" par_one_128 par_one_128
  par_row "2 sync replicas, batch 128" par_sync2_128 par_one_128; s128=$r
  for what in shared host; do # vkt bench parallel's exposed time of 2 sync replicas
    read -r e m red <<<"$(par_exposed "$what")"
    p=$(percent "$e" "$m")
    printf '| %s | %s | %s |\n' "vkt bench parallel, batch 1024, 2 sync replicas $([[ $what == shared ]] &&
      echo "sharing one VkDevice (${red:-?} reducer)" || echo "on a VkDevice each (host reducer)"): exposed ms per step" \
      "$(fmt "${p:+$e of $m ms per step}" par_bench1024)" "$([[ -n $p ]] && echo "$p% of the step" || echo -)"
    [[ $what == shared ]] && x=$p xd="${p:+$e of $m ms ($p%), $red reducer}"
  done
  echo
  echo "vs one replica: above 1, the parallel run is faster (one physical device runs both replicas or"
  echo "stages). samples/s: vkt train's result line, over its steps. exposed: the ms per replica and"
  echo "step its device waited for the host (vkt_trainer_stats). Replicas on one physical device share"
  echo "one VkDevice by default where its compute family has a queue for each (README, VKT_SHARE_DEVICE)."
  # the targets, in the issue's order
  target "issue 21: 2 sync replicas vs one, MLP batch 1024, device listed twice" ">= 0.85x" "${s1024:+${s1024}x}" \
    "$(at_least "$s1024" 0.85)"
  target "issue 21: 2 sync replicas vs one, MLP batch 128, device listed twice" ">= 0.6x" "${s128:+${s128}x}" \
    "$(at_least "$s128" 0.6)"
  target "issue 21: exposed averaging, 2 sync replicas sharing one VkDevice, MLP batch 1024 (vkt bench parallel)" \
    "<= 10% of the step" "$xd" "$(at_most "$x" 10)"
  target "issue 21: 2 async replicas vs one, MLP batch 1024, device listed twice" ">= 0.85x" "${a1024:+${a1024}x}" \
    "$(at_least "$a1024" 0.85)"
  target "issue 21: 2 pipeline stages x 4 micro-batches vs one stage (one replica), MLP batch 1024" ">= 0.7x" \
    "${p1024:+${p1024}x}" "$(at_least "$p1024" 0.7)"
}
# every GEMM of a list beside torch.mm: rows, and a target on the worst ratio
gemm_list() { # run name, shapes, what, minimum
  local s v t r worst="" worst_s="" n=0 got=0 bad=0
  for s in $2; do
    v=$(g3 "$(vk_shape "$1" "$s")"); t=$(g3 "$(torch_shape "$s")"); r=$(ratio "$v" "$t")
    row "$3: GEMM $(shape_label "$s") (TFLOP/s)" "$v" "$t" "$r" "$1" torch
    n=$((n + 1))
    if [[ -n $r ]]; then
      got=$((got + 1))
      [[ $(at_least "$r" "$4") == FAIL ]] && bad=$((bad + 1))
      if [[ -z $worst ]] || awk -v a="$r" -v b="$worst" 'BEGIN { exit !(a < b) }'; then
        worst=$r worst_s=$s
      fi
    fi
  done
  local verdict=""
  ((got == n && n > 0)) && verdict=$( ((bad)) && echo FAIL || echo pass)
  ((got < n && bad)) && verdict=FAIL
  target "$3: every GEMM vs torch.mm, same shape and transposes" ">= $4x each" \
    "$( [[ -n $worst ]] && echo "$((got - bad)) of $n at or above; worst ${worst}x ($(shape_label "$worst_s"))" ||
        echo "none of $n measured")" "$verdict"
}

print_tables() {
  local n v t r b s a d h bt
  echo "vktrain $commit on '$(sed -n 's/^device 0: //p' "$out/devices.txt" | head -1)'$env_note;" \
    "PyTorch $(val torch '^torch: version' version) on $gpu; $(cat "$out/seconds" 2>/dev/null || echo '?') s"
  # the kernels vkt chose for the device (vkt devices: its profile and each family's variant)
  awk '$1 == "kernel" && $2 == "style" { s = $3 } $1 == "compute" && $2 == "units" { cu = $3 }
       $1 == "gemm" || $1 == "conv" || $1 == "attention" { v = v ", " $1 " " $2 }
       END { if (s != "") printf "kernels: %s style, %s compute units%s\n", s, cu, v }' "$out/devices.txt"
  ((cpu)) && echo "(--cpu: lavapipe and PyTorch on the CPU, small sizes: a check of the script, not figures)"
  echo
  echo "| work | vktrain | PyTorch | speed vs PyTorch |"
  echo "|---|---|---|---|"
  for n in ${sizes//,/ }; do
    v=$(g3 "$(awk -v n="$n" '$1 == n && $NF == "ok" { print $3 / 1000 }' "$out/vk_gemm.txt" 2>/dev/null)")
    t=$(g3 "$(val torch "^torch: gemm n=$n " best_tflops)")
    r=$(ratio "$v" "$t")
    row "GEMM $n fp32 (TFLOP/s)" "$v" "$t" "$r" vk_gemm torch
    if ((cpu || n >= 2048)); then # issue 20: 0.85x cuBLAS from 2048 to 8192
      target "GEMM $n fp32 vs cuBLAS (torch.mm)" ">= 0.85x" "${r:+${r}x}" "$(at_least "$r" 0.85)"
    fi
  done
  ((cpu)) || row "GEMM 8192, TF32 tensor cores (TFLOP/s)" "-" "$(val torch '^torch: gemm_tf32' best_tflops)"
  for t in bf16 fp16; do # vktrain alone: compare with the issue's cuBLAS figure (about 790 in bf16)
    for n in ${sizes//,/ }; do
      v=$(g3 "$(awk -v n="$n" '$1 == n && $NF == "ok" { print $3 / 1000 }' "$out/vk_gemm_$t.txt" 2>/dev/null)")
      row "GEMM $n, A and B $t, fp32 accumulation (TFLOP/s)" "$v" "-" "" "vk_gemm_$t"
    done
  done
  gemm_list vk_gemms_mlp1024 "$mlp_shapes" "MLP 784-256-128-10 step, batch 1024" 0.6
  gemm_list vk_gemms_lm "$lm_shapes" \
    "char LM step, $lm_rows rows, width $lm_c, vocabulary $vocab$( ((cpu)) || echo ' (6 layers, 6 heads, context 256, batch 64)')" 0.6
  for s in $lm64_shapes; do
    v=$(g3 "$(vk_shape vk_gemms_lm64 "$s")"); t=$(g3 "$(torch_shape "$s")")
    row "char LM default shape: GEMM $(shape_label "$s") (TFLOP/s)" "$v" "$t" "$(ratio "$v" "$t")" vk_gemms_lm64 torch
  done
  for b in 128 1024; do
    v=$(val "vk_step$b" '^result:' step_ms); t=$(val torch "^torch: mlp_step batch=$b " best_ms)
    r=$(ratio "$v" "$t" 1)
    row "MLP 784-256-128-10 step, batch $b (best ms)" "$v" "$t" "$r" "vk_step$b" torch
    ((b == 128)) && target "MLP 784-256-128-10 step, batch 128, vs PyTorch eager" ">= 2x" "${r:+${r}x}" \
      "$(at_least "$r" 2)"
  done
  for b in 128 1024; do
    v=$(g3 "$(rate "vk_loop$b")"); t=$(g3 "$(val torch "^torch: mlp_data_loop batch=$b " samples_per_s)")
    row "MNIST loop, batch $b (samples/s)" "$v" "$t" "$(ratio "$v" "$t")" "vk_loop$b" torch
  done
  if ((!cpu)); then
    v=$(g3 "$(rate vk_mlp4096)")
    t=$(g3 "$(awk -v m="$(val torch '^torch: mlp4096_step' best_ms)" 'BEGIN { if (m > 0) print 1024000 / m }')")
    row "MLP 784-4096-4096-10, batch 1024 (samples/s)" "$v" "$t" "$(ratio "$v" "$t")" vk_mlp4096 torch
  fi
  for b in 64 512; do
    v=$(ms_per_step "$(rate "vk_cnn$b")" "$b"); t=$(val torch "^torch: cnn_step batch=$b " median_ms)
    r=$(ratio "$v" "$t" 1)
    row "CNN step, batch $b (ms; vktrain: vkt train's loop)" "$v" "$t" "$r" "vk_cnn$b" torch
    n=1; ((b == 512)) && n=0.7
    target "CNN training, batch $b, vs PyTorch" ">= ${n}x" "${r:+${r}x}" "$(at_least "$r" "$n")"
    ((cpu)) && continue
    v=$(ms_per_step "$(rate "vk_cnn${b}_im2col")" "$b")
    row "same, conv_im2col forced (VKT_KERNELS=gpu,conv_im2col)" "$v" "$t" "$(ratio "$v" "$t" 1)" \
      "vk_cnn${b}_im2col" torch
  done
  v=$(ms_per_step "$(rate vk_lm)" 32); t=$(val torch '^torch: charlm precision=fp32 width=64 ' median_ms)
  r=$(ratio "$v" "$t" 1)
  row "char LM, width 64, 2 layers, context 64, batch 32 (ms per step)" "$v" "$t" "$r" vk_lm torch
  target "char LM, default shape, vs PyTorch eager" ">= 1.2x" "${r:+${r}x}" "$(at_least "$r" 1.2)"
  if ((!cpu)); then
    v=$(ms_per_step "$(rate vk_lm384)" 64)
    t=$(val torch '^torch: charlm precision=fp32 width=384 ' median_ms)
    r=$(ratio "$v" "$t" 1)
    row "char LM, width 384, 6 layers, 6 heads, context 256, batch 64 (ms per step)" "$v" "$t" "$r" \
      vk_lm384 torch
    target "char LM, width 384, 6 layers, 6 heads, context 256, batch 64, vs PyTorch fp32 eager" \
      ">= 0.8x" "${r:+${r}x}" "$(at_least "$r" 0.8)"
    t=$(val torch '^torch: charlm precision=bf16-autocast width=384 ' median_ms)
    row "same, PyTorch with bf16 autocast (ms per step)" "$v" "$t" "$(ratio "$v" "$t" 1)" vk_lm384 torch
  fi
  # attention: fused (the device's attention variant), forward + backward at every shape
  local variant ran=0 n_attn=0 worst=""
  variant=$(awk '$1 == "attention" { print $2; exit }' "$out/devices.txt" 2>/dev/null)
  for a in $attn; do
    IFS=, read -r bt d b h <<<"$a"
    v=$(vk_attn "${bt}_$d"); v=${v:+$(printf '%.3f' "$v")}
    t=$(torch_attn "$a")
    r=$(ratio "$v" "$t" 1)
    row "causal attention forward + backward, context $bt, head size $d, batch $b, $h heads (ms; vktrain: device time, $variant)" \
      "$v" "$t" "$r" "vk_attn_${bt}_$d" torch
    n_attn=$((n_attn + 1))
    [[ -n $v ]] && ran=$((ran + 1))
    if [[ -n $r ]] && { [[ -z $worst ]] || awk -v a="$r" -v b="$worst" 'BEGIN { exit !(a < b) }'; }; then
      worst=$r
    fi
  done
  local verdict="" span
  span=$(tr ' ' '\n' <<<"$attn" | awk -F, '{ if ($1 > t) t = $1; if (d == "" || $2 < d) d = $2; if ($2 > e) e = $2 }
    END { printf "contexts up to %s, head sizes %s to %s", t, d, e }')
  if ((ran == n_attn)); then verdict=$([[ $variant == attention_flash ]] && echo pass || echo FAIL)
  elif ((ran)) && [[ $variant != attention_flash ]]; then verdict=FAIL; fi
  target "causal attention, forward + backward, fused" \
    "attention_flash (online softmax, no T x T array); contexts up to 2048, head sizes 32 to 128" \
    "$ran of $n_attn ran ($span) with ${variant:-?}${worst:+; slowest vs PyTorch SDPA ${worst}x}" "$verdict"
  echo
  echo "speed vs PyTorch: above 1, vktrain is faster. vktrain's loops (MNIST, CNN, char LM) are"
  echo "vkt train's samples/s over its training steps; PyTorch's steps use batches already on the"
  echo "device (median ms). GEMM: best of repeated runs. Attention: vktrain's device time of the"
  echo "causal_attention op (vkt bench layers), PyTorch's scaled_dot_product_attention (best ms)."
  print_parallel
  echo
  echo "Issue 20's and 21's targets$( ((cpu)) && echo ' (--cpu: nothing here judges a GPU)'):"
  echo
  echo "| target | needed | measured | result |"
  echo "|---|---|---|---|"
  printf '%s' "$targets"
  echo
  echo "result: targets pass=$n_pass fail=$n_fail unmeasured=$n_none"
  echo "Outputs: $out"
}
echo
print_tables | tee "$out/table.md" || { echo "bench/gpu.sh: printing the tables failed" >&2; exit 1; }
[[ -n $table ]] && exit 0
exit "$failed"
