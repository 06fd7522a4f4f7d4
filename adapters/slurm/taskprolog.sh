#!/bin/sh
# topoplace TaskProlog: export the GPUs and aligned NICs that the job's plan gives this node.
#
# slurmd runs it (as the job's user) before each task; every stdout line "export NAME=VALUE" is set in
# the task's environment. The plan is the last "topoplace/v1 ..." in the job's Comment, written by
# job_submit.lua (format: README.md, "The plan in the comment"); Slurm itself allocated exactly those devices.
# Jobs without a plan are left alone. POSIX sh + awk + scontrol only; never fails the task.
#
# Exports: CUDA_VISIBLE_DEVICES (unless TOPOPLACE_KEEP_CUDA=1, e.g. with cgroup ConstrainDevices,
# where Slurm renumbers devices), NCCL_IB_HCA (the NICs paired with the GPUs, in order),
# TOPOPLACE_GPUS, TOPOPLACE_NICS, TOPOPLACE_PLAN_ID.

node="${SLURMD_NODENAME:-$(hostname -s)}"
[ -n "$SLURM_JOB_ID" ] || exit 0
SCONTROL="${TOPOPLACE_SCONTROL:-scontrol}"
# The plan's tokens are "topoplace/v1", "id=…" and "HOSTLIST:gpu=…:nic=…"; the last plan wins.
comment=$("$SCONTROL" -o show job "$SLURM_JOB_ID" 2>/dev/null \
  | grep -o 'topoplace/v1 id=[^ ]*\( [^ =]*:gpu=[^ ]*\)*' | tail -n 1)
case "$comment" in *topoplace/v1*) ;; *) exit 0 ;; esac

echo "$comment" | awk -v node="$node" -v keep="${TOPOPLACE_KEEP_CUDA:-0}" '
function expand(expr,    n, i, item, pre, body, rest, parts, k, lo, hi, w, j, out, items, depth, c, cur) {
  # Slurm hostlist expansion (one bracket group per item is what plans use; nested products too).
  n = 0; depth = 0; cur = ""
  for (i = 1; i <= length(expr); i++) {
    c = substr(expr, i, 1)
    if (c == "[") depth++
    if (c == "]") depth--
    if (c == "," && depth == 0) { items[++n] = cur; cur = "" } else cur = cur c
  }
  items[++n] = cur
  out = ""
  for (i = 1; i <= n; i++) out = out " " expand_item(items[i])
  return out
}
function expand_item(item,    p, pre, body, rest, parts, k, lo, hi, w, j, res, tails, t, m, tl) {
  p = index(item, "[")
  if (p == 0) return item
  pre = substr(item, 1, p - 1)
  body = substr(item, p + 1, index(item, "]") - p - 1)
  rest = substr(item, index(item, "]") + 1)
  tails = expand_item(rest)
  m = split(tails, tl, " ")
  if (m == 0) { m = 1; tl[1] = "" }
  res = ""
  k = split(body, parts, ",")
  for (j = 1; j <= k; j++) {
    lo = parts[j]; hi = parts[j]
    if (index(parts[j], "-")) { lo = substr(parts[j], 1, index(parts[j], "-") - 1); hi = substr(parts[j], index(parts[j], "-") + 1) }
    w = length(lo)
    for (v = lo + 0; v <= hi + 0; v++) for (t = 1; t <= m; t++) res = res " " pre sprintf("%0" w "d", v) tl[t]
  }
  return res
}
{
  start = 0
  for (i = NF; i >= 1; i--) if ($i == "topoplace/v1") { start = i; break }
  if (!start) exit 0
  id = $(start + 1); sub(/^id=/, "", id)
  for (i = start + 2; i <= NF; i++) {
    split($i, f, ":")
    if (f[2] !~ /^gpu=/ || f[3] !~ /^nic=/) continue
    hosts = expand(f[1])
    nh = split(hosts, h, " ")
    for (j = 1; j <= nh; j++) if (h[j] == node) {
      gpus = substr(f[2], 5); nics = substr(f[3], 5)
      print "export TOPOPLACE_PLAN_ID=" id
      print "export TOPOPLACE_GPUS=" gpus
      print "export TOPOPLACE_NICS=" nics
      if (keep != "1" && gpus != "") print "export CUDA_VISIBLE_DEVICES=" gpus
      if (nics != "") print "export NCCL_IB_HCA=" nics
      exit 0
    }
  }
}'
exit 0
