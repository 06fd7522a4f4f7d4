#!/bin/bash
# As sweep.sh, but before each line the worktree is put at the commit named in $L/commit (so a faster
# commit can take over between runs, never during one). Waits for sweep.sh to stop first.
L=/work/replay-s19-logs
while pgrep -f "bash sweep.sh" >/dev/null; do sleep 5; done
rm -f $L/STOP
POL_DEFAULT=fgd,fgd/tight-gpu+unfed,solver,fgd/tight-gpu+unfed-bestof16,solver-bestof16
touch $L/done.txt
while true; do
  [ -e $L/STOP ] && { echo "STOP file at $(date -u +%T)" >> $L/sweep.log; exit 0; }
  line=$(grep -v '^#' $L/queue.txt | grep -v '^$' | while read -r l; do grep -qxF "$l" $L/done.txt || { echo "$l"; break; }; done)
  [ -z "$line" ] && { echo "queue empty at $(date -u +%T)" >> $L/sweep.log; exit 0; }
  C=$(cat $L/commit)
  git -C /work/wt/replay-run checkout -q --detach "$C" || exit 1
  cd /work/wt/replay-run || exit 1
  export TOPOPLACE_OPENB=/work/shared/data/openb PYTHONPATH=$PWD:$PWD/proto
  set -- $line; V=$1; S=$2; P=${3:-$POL_DEFAULT}; T=${4:+-$4}
  echo "$(date -u +%T) start $V $S $P$T at ${C:0:7} | $(uptime)" >> $L/sweep.log
  nice -n 15 /work/main/.venv/bin/python -m bench.replay --pods $V --policies $P --seeds $S --jobs 1 \
    --out $L/$V-$S$T.json > $L/$V-$S$T.log 2>&1
  rc=$?
  echo "$(date -u +%T) end $V $S$T rc=$rc | $(uptime)" >> $L/sweep.log
  echo "$line" >> $L/done.txt
done
