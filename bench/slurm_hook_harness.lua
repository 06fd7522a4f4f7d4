--[[ Runs job_submit.lua outside slurmctld, as slurmctld's job_submit/lua plugin would: a `slurm`
table with the plugin's log functions and return codes, then slurm_job_submit(job_desc, {}, uid).
Used by `python -m bench.slurm_compare --hook-cost --client lua` to time the hook's own path.

  lua5.1 slurm_hook_harness.lua /etc/slurm/job_submit.lua key=value ...   (one job per line on stdin)

Each stdin line is a job: space-separated key=value job_desc fields (numbers for min_nodes etc.).
For each job it prints one line: "<ms> <rc> <req_nodes> | <comment>" and the hook's log lines to stderr.
The interpreter stays up across jobs, as slurmctld's does, so the time is the hook's, not a process start.
]]
local script = arg[1]
-- slurmctld blocks SIGPIPE in all its threads (controller.c's controller_sigarray): a send on a
-- connection the agent closed returns EPIPE there instead of ending the process.
local psignal = require("posix.signal")
psignal.signal(psignal.SIGPIPE, psignal.SIG_IGN)
local ptime = require("posix.time")
local function now_ms()
  local t = ptime.clock_gettime(ptime.CLOCK_MONOTONIC)
  return t.tv_sec * 1000 + t.tv_nsec / 1e6
end
local function log(kind)
  return function(fmt, ...) io.stderr:write(kind, ": ", string.format(fmt, ...), "\n") end
end
slurm = {
  SUCCESS = 0, ERROR = -1, ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE = 2014,
  log_info = log("info"), log_error = log("error"), log_user = log("user"), log_debug = log("debug"),
}
dofile(script)
local numbers = { min_nodes = true, max_nodes = true, num_tasks = true, time_limit = true, het_job_offset = true }
for line in io.stdin:lines() do
  local job = { environment = {} }
  for key, value in line:gmatch("([%w_]+)=(%S*)") do
    job[key] = numbers[key] and tonumber(value) or value
  end
  local t0 = now_ms()
  local rc = slurm_job_submit(job, {}, 0)
  local ms = now_ms() - t0
  io.stdout:write(string.format("%.3f %d %s | %s\n", ms, rc, job.req_nodes or "", job.comment or ""))
  io.stdout:flush()
end
