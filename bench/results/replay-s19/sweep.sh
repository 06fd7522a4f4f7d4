#!/bin/bash
# The session 19 sweep: each line of queue.txt (VARIANT SEED [POLICIES [TAG]]) is one bench.replay run
# writing VARIANT-SEED[-TAG].json; done.txt holds the lines taken. Two of these ran at once, one taking
# the queue from its start (LANE=1) and one from its end (LANE=2, which claims a line when it starts it
# and skips a line the log shows started). Before each run the worktree W is put at the commit named in
# ./commit, so a newer commit takes over between runs, never during one. A file STOP<LANE> stops a lane.
# Usage: LANE=1 W=/path/to/detached/worktree L=/path/to/this/folder bash sweep.sh
set -u
: "${LANE:=1}" "${W:?a detached worktree}" "${L:=$(cd "$(dirname "$0")" && pwd)}"
POL_DEFAULT=fgd,fgd/tight-gpu+unfed,solver,fgd/tight-gpu+unfed-bestof16,solver-bestof16
STOP=$L/STOP; [ "$LANE" = 2 ] && STOP=$L/STOP2
touch "$L/done.txt"
next_line() {
  local order=cat; [ "$LANE" = 2 ] && order=tac
  grep -v '^#' "$L/queue.txt" | grep -v '^$' | $order | while read -r l; do
    set -- $l
    grep -qxF "$l" "$L/done.txt" && continue
    [ "$LANE" = 2 ] && grep -q "start $1 $2 .*${3:-$POL_DEFAULT}${4:+-$4}" "$L/sweep.log" && continue
    echo "$l"; break
  done
}
while true; do
  [ -e "$STOP" ] && { echo "$(basename "$STOP") file at $(date -u +%T)" >> "$L/sweep.log"; exit 0; }
  line=$(next_line)
  [ -z "$line" ] && { echo "lane $LANE: queue empty at $(date -u +%T)" >> "$L/sweep.log"; exit 0; }
  [ "$LANE" = 2 ] && echo "$line" >> "$L/done.txt"
  C=$(cat "$L/commit")
  git -C "$W" checkout -q --detach "$C" || exit 1
  set -- $line; V=$1; S=$2; P=${3:-$POL_DEFAULT}; T=${4:+-$4}
  echo "$(date -u +%T) lane$LANE start $V $S $P$T at ${C:0:7} | $(uptime)" >> "$L/sweep.log"
  (cd "$W" && TOPOPLACE_OPENB=${TOPOPLACE_OPENB:-../shared/data/openb} PYTHONPATH=$W:$W/proto \
    nice -n 15 python -m bench.replay --pods "$V" --policies "$P" --seeds "$S" --jobs 1 \
    --out "$L/$V-$S$T.json" > "$L/$V-$S$T.log" 2>&1)
  echo "$(date -u +%T) lane$LANE end $V $S$T rc=$? | $(uptime)" >> "$L/sweep.log"
  [ "$LANE" = 1 ] && echo "$line" >> "$L/done.txt"
done
