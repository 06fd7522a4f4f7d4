#!/bin/bash
# A second lane over queue.txt from its end: claims a line in done.txt when it starts it (the first
# lane appends at the end of a run) and skips any line the log shows started.
L=/work/replay-s19-logs
W=/work/wt/replay-run2
POL_DEFAULT=fgd,fgd/tight-gpu+unfed,solver,fgd/tight-gpu+unfed-bestof16,solver-bestof16
while true; do
  [ -e $L/STOP2 ] && { echo "STOP2 file at $(date -u +%T)" >> $L/sweep.log; exit 0; }
  line=$(grep -v '^#' $L/queue.txt | grep -v '^$' | tac | while read -r l; do
    set -- $l; T=${4:+-$4}
    grep -qxF "$l" $L/done.txt && continue
    grep -q "start $1 $2 .*${3:-$POL_DEFAULT}$T" $L/sweep.log && continue
    echo "$l"; break; done)
  [ -z "$line" ] && { echo "lane2: queue empty at $(date -u +%T)" >> $L/sweep.log; exit 0; }
  echo "$line" >> $L/done.txt
  C=$(cat $L/commit)
  git -C $W checkout -q --detach "$C" || exit 1
  cd $W || exit 1
  export TOPOPLACE_OPENB=/work/shared/data/openb PYTHONPATH=$PWD:$PWD/proto
  set -- $line; V=$1; S=$2; P=${3:-$POL_DEFAULT}; T=${4:+-$4}
  echo "$(date -u +%T) lane2 start $V $S $P$T at ${C:0:7} | $(uptime)" >> $L/sweep.log
  nice -n 15 /work/main/.venv/bin/python -m bench.replay --pods $V --policies $P --seeds $S --jobs 1 \
    --out $L/$V-$S$T.json > $L/$V-$S$T.log 2>&1
  rc=$?
  echo "$(date -u +%T) lane2 end $V $S$T rc=$rc | $(uptime)" >> $L/sweep.log
done
