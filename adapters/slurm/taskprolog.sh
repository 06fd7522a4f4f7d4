#!/bin/sh
# topoplace TaskProlog: export the GPUs and aligned NICs that Slurm allocated to this job on this node.
#
# slurmd runs it (as the job's user) before each task; every stdout line "export NAME=VALUE" is set in
# the task's environment. The devices come from Slurm's allocation (scontrol show job -d, GRES IDX mapped
# through gres.conf; SLURM_STEP_GPUS for a step), never from the topoplace plan in the comment: a plan
# that disagrees with the allocation is logged (syslog, and $TOPOPLACE_PROLOG_LOG when set), not exported.
# The work is done by job_devices.py next to this file, with the system python3 and no site-packages
# (-I -S: nothing of topoplace's dependencies is needed on compute nodes). Never fails the task.
#
# Environment it reads (set them in slurm.conf's TaskProlog wrapper or the job): SLURM_CONF (gres.conf
# is read next to it, or TOPOPLACE_GRES_CONF), TOPOPLACE_TOPO_DIR (nvidia-smi captures, to name NICs
# where /sys/class/infiniband_verbs cannot), TOPOPLACE_KEEP_CUDA=1 (cgroup ConstrainDevices: keep
# Slurm's renumbered CUDA_VISIBLE_DEVICES), TOPOPLACE_PYTHON (default python3).

[ -n "$SLURM_JOB_ID" ] || exit 0
# job_devices.py imports the adapter's parsers from the installed package: link this script into place
# (ln -s), do not copy it; a link is followed back to the package.
here=$(dirname "$(readlink -f "$0")")
"${TOPOPLACE_PYTHON:-python3}" -I -S "$here/job_devices.py" 2>>"${TOPOPLACE_PROLOG_STDERR:-/dev/null}"
exit 0
