--[[ topoplace job_submit.lua: plan GPU jobs with topoplace and make Slurm enforce the plan.

For a job that asks for GPUs, the job description is written as JSON to a private temporary file and
passed on stdin to a fixed command line (the stdlib-only topoplace client, bounded by `timeout`); no
user data ever reaches a shell. The answer sets req_nodes, min_nodes = max_nodes, tres_per_node as
GRES per PCIe switch group (gres:gpu:sw2:2,gres:nic:sw2:2) and appends the plan to the comment.

Configuration: the defaults below, overridden by `job_submit_topoplace.conf` next to this file
(lines `key = value`, `#` comments). Keys:
  python        interpreter for the client                   (/usr/bin/python3)
  client        path of adapters/slurm/place_client.py       (/usr/lib/topoplace/place_client.py)
  agent         address of `topoplace slurm agent`            (127.0.0.1:6820; or unix:/path, preferred)
  agent_uid     uids besides slurmctld's own and root that may run the agent, comma-separated ("")
  direct        "auto": with agent = unix:/path and luaposix installed (Debian: lua-posix), talk to the
                agent's socket from slurmctld's Lua, no process per submit; "no": always the client (auto)
  timeout       seconds before the hook gives up              (2)
  fail_mode     "open": on error/timeout submit unchanged;  "closed": refuse GPU jobs   (open)
  refuse_never_fits  "yes": refuse a job that cannot fit even on an empty cluster       (yes)
  enabled       "no" turns the hook into a no-op                                          (yes)
  model_features  GPU models that are node features, comma-separated (""): when the agent cannot
                be asked, a --gres=gpu:<model>:N job is still rewritten to gpu:N + feature <model>,
                since no GRES is typed by model once GRES are typed per PCIe switch
]]

local job_desc_being_submitted = nil  -- for failed(): the job whose submit is being handled

local config = {
  python = "/usr/bin/python3",
  client = "/usr/lib/topoplace/place_client.py",
  agent = "127.0.0.1:6820",
  agent_uid = "",
  timeout = "2",
  fail_mode = "open",
  refuse_never_fits = "yes",
  enabled = "yes",
  model_features = "",
  direct = "auto",
}

local FIELDS_STRING = { "tres_per_node", "tres_per_job", "tres_per_task", "features", "partition",
  "name", "comment", "req_nodes", "exc_nodes", "gres" }
local FIELDS_NUMBER = { "min_nodes", "max_nodes", "num_tasks", "ntasks_per_node", "cpus_per_task",
  "req_switch", "wait4switch", "time_limit" }
local SETTABLE_NUMBER = { min_nodes = true, max_nodes = true }
local SETTABLE_STRING = { req_nodes = true, tres_per_node = true, tres_per_job = true,
  tres_per_task = true, comment = true, features = true }

local function script_dir()
  local source = debug.getinfo(1, "S").source
  return (source:sub(1, 1) == "@" and source:sub(2):match("^(.*)/[^/]*$")) or "."
end

local function load_config()
  local file = io.open(script_dir() .. "/job_submit_topoplace.conf", "r")
  if not file then return end
  for line in file:lines() do
    local key, value = line:gsub("#.*$", ""):match("^%s*([%w_]+)%s*=%s*(.-)%s*$")
    if key and config[key] ~= nil then config[key] = value end
  end
  file:close()
end

-- Only the path of our own temporary file is quoted into the command line, and only if it is plain.
local function safe_path(path)
  return path ~= nil and path:match("^[%w/_.%-]+$") ~= nil
end

local function json_string(value)
  local escaped = tostring(value):gsub('[%c"\\]', function(c)
    local named = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }
    return named[c] or string.format("\\u%04x", c:byte())
  end)
  return '"' .. escaped .. '"'
end

local function job_json(job_desc, submit_uid)
  local parts = { '"submit_uid":' .. string.format("%d", tonumber(submit_uid) or -1) }
  for _, key in ipairs(FIELDS_STRING) do
    local value = job_desc[key]
    if value ~= nil and value ~= "" then parts[#parts + 1] = json_string(key) .. ":" .. json_string(value) end
  end
  for _, key in ipairs(FIELDS_NUMBER) do
    local value = tonumber(job_desc[key])
    if value ~= nil then parts[#parts + 1] = json_string(key) .. ":" .. string.format("%d", value) end
  end
  return "{" .. table.concat(parts, ",") .. "}"
end

local function wants_gpus(job_desc)
  for _, key in ipairs({ "tres_per_node", "tres_per_job", "tres_per_task", "gres" }) do
    local value = job_desc[key]
    if type(value) == "string" and value:find("gpu", 1, true) then return true end
  end
  return false
end

-- The answer's line format (place_client.render) → the table apply() reads.
local function parse_answer(output)
  local answer = { set = {}, order = {}, env = {} }
  for line in output:gmatch("[^\n]+") do
    local verb, rest = line:match("^(%S+)%s?(.*)$")
    if verb == "action" then answer.action = rest
    elseif verb == "message" then answer.message = rest
    elseif verb == "notice" then answer.notice = rest
    elseif verb == "set" then
      local key, value = rest:match("^(%S+)%s?(.*)$")
      if key then answer.set[key] = value; answer.order[#answer.order + 1] = key end
    elseif verb == "setenv" then
      local key, value = rest:match("^([%w_]+)%s?(.*)$")
      if key then answer.env[key] = value end
    end
  end
  return answer
end

-- luaposix, if installed: loaded once per slurmctld (require caches it); false when absent.
local posix_ok, posix = pcall(function()
  return {
    socket = require("posix.sys.socket"), stat = require("posix.sys.stat"), poll = require("posix.poll"),
    unistd = require("posix.unistd"), time = require("posix.time"), fcntl = require("posix.fcntl"),
  }
end)
if not posix_ok then posix = nil end

local function allowed_uid(uid)
  if uid == 0 or uid == posix.unistd.geteuid() then return true end
  for extra in config.agent_uid:gmatch("%d+") do
    if tonumber(extra) == uid then return true end
  end
  return false
end

-- The socket's kernel peer check is not in luaposix, so the file system says who runs the agent:
-- the socket must belong to an allowed user, in a directory no other user can write (or a sticky
-- one owned by root or an allowed user), so nobody else can have put or swapped a socket there.
local function trusted_socket(path)
  local info = posix.stat.lstat(path)
  if info == nil then return false, path .. " does not exist (is the agent running?)" end
  if posix.stat.S_ISSOCK(info.st_mode) == 0 then return false, path .. " is not a socket" end
  if not allowed_uid(info.st_uid) then
    return false, path .. " belongs to uid " .. info.st_uid .. ", not an allowed user"
  end
  local dir = path:match("^(.*)/[^/]*$")
  local dinfo = posix.stat.stat(dir ~= "" and dir or "/")
  if dinfo == nil then return false, "cannot stat the directory of " .. path end
  local function bit(mode, value) return math.floor(mode / value) % 2 == 1 end
  local writable = bit(dinfo.st_mode, 16) or bit(dinfo.st_mode, 2) -- g+w (0020) or o+w (0002)
  local sticky = bit(dinfo.st_mode, 512)
  if writable and not (sticky and allowed_uid(dinfo.st_uid)) then
    return false, dir .. " is writable by other users"
  end
  return true, nil
end

local function now_ms()
  local t = posix.time.clock_gettime(posix.time.CLOCK_MONOTONIC)
  return t.tv_sec * 1000 + t.tv_nsec / 1e6
end

-- The agent connection kept between submits: slurmctld keeps this Lua state alive and calls the hook
-- under its job write lock, one submit at a time, so one connection serves every submit and a submit
-- costs the agent no accept and no new thread (the answers' slowest 5 % spent 12 ms outside the
-- agent's place() under load, most of it per connection). nil when none is open.
local kept = nil

local function drop_kept()
  if kept ~= nil then
    posix.unistd.close(kept.fd)
    kept.fd = nil -- its guard must not close the number again: by then it may be another file's
    kept = nil
  end
end

local function connect_agent(path)
  local ok, why = trusted_socket(path)
  if not ok then return nil, "topoplace agent refused: " .. why end
  local S = posix.socket
  local fd, err = S.socket(S.AF_UNIX, S.SOCK_STREAM, 0)
  if fd == nil then return nil, "socket: " .. tostring(err) end
  -- Not inherited by what slurmctld starts (prologs, mail), which would hold the agent's end open.
  posix.fcntl.fcntl(fd, posix.fcntl.F_SETFD, posix.fcntl.FD_CLOEXEC)
  if S.connect(fd, { family = S.AF_UNIX, path = path }) == nil then
    posix.unistd.close(fd)
    return nil, "topoplace agent " .. path .. " unreachable"
  end
  -- Closed with the Lua state if still open: slurmctld makes a new one when job_submit.lua changes.
  local conn = { fd = fd, path = path }
  conn.guard = newproxy(true)
  getmetatable(conn.guard).__gc = function() if conn.fd ~= nil then posix.unistd.close(conn.fd) end end
  return conn, nil
end

-- One HTTP/1.1 exchange on conn: status, payload, keep (the agent will read another request on
-- it); or nil, reason, got (whether any byte of an answer came).
local function exchange(conn, request, deadline, seconds)
  local S = posix.socket
  local rest = request
  while #rest > 0 do
    local sent = S.send(conn.fd, rest)
    if sent == nil then return nil, "topoplace agent closed the connection", false end
    rest = rest:sub(sent + 1)
  end
  local raw, head, length = "", nil, nil
  while true do
    if head == nil then
      local stop = raw:find("\r\n\r\n", 1, true)
      if stop ~= nil then
        head = raw:sub(1, stop + 3)
        length = tonumber(head:match("\r\n[Cc]ontent%-[Ll]ength:%s*(%d+)"))
      end
    end
    if head ~= nil and length ~= nil and #raw - #head >= length then break end
    local left = deadline - now_ms()
    if left <= 0 or posix.poll.rpoll(conn.fd, math.ceil(left)) ~= 1 then
      return nil, "no answer within " .. seconds .. " s", raw ~= ""
    end
    local chunk = S.recv(conn.fd, 65536)
    if chunk == nil then return nil, "topoplace agent: read failed", raw ~= "" end
    if chunk == "" then -- closed: the answer is what came, if it came whole (HTTP/1.0: no length)
      if head == nil or length ~= nil then return nil, "topoplace agent closed the connection", raw ~= "" end
      break
    end
    raw = raw .. chunk
  end
  local status = head:match("^HTTP/%S+ (%d+)")
  if status == nil then return nil, "topoplace agent: malformed answer", true end
  local keep = length ~= nil and head:match("^HTTP/1%.1 ") ~= nil
    and not head:lower():find("\r\nconnection:%s*close")
  return status, raw:sub(#head + 1, #head + (length or #raw)), keep
end

-- POST /place on the agent's unix socket, answer in the line format; nil, reason on failure. The
-- connection is kept for the next submit; a kept one the agent has since closed (restarted, idle
-- timeout) is opened again once, if not a byte of an answer came on it.
local function ask_socket(path, body, seconds)
  local deadline = now_ms() + seconds * 1000
  local request = "POST /place HTTP/1.1\r\nHost: topoplace\r\nAccept: text/plain\r\n"
    .. "Content-Type: application/json\r\nContent-Length: " .. #body .. "\r\n\r\n" .. body
  -- An idle kept connection with something to read has been closed by the agent (restarted, idle
  -- timeout): the next send would fail, so it is dropped now. (Should the agent close it between
  -- this check and the send, the send fails with EPIPE: slurmctld blocks SIGPIPE in every thread.)
  if kept ~= nil and (kept.path ~= path or posix.poll.rpoll(kept.fd, 0) == 1) then drop_kept() end
  for attempt = 1, 2 do
    local reused = kept ~= nil
    if not reused then
      local conn, why = connect_agent(path)
      if conn == nil then return nil, why end
      kept = conn
    end
    local status, payload, more = exchange(kept, request, deadline, seconds)
    if status ~= nil then
      if not more then drop_kept() end
      local answer = parse_answer(payload)
      if answer.action == nil then return nil, "topoplace agent answered HTTP " .. status end
      return answer, nil
    end
    drop_kept() -- whatever the agent might still send on it belongs to this submit, not the next
    if not reused or more or attempt == 2 or now_ms() >= deadline then return nil, payload end
  end
end

local function ask_topoplace(job_desc, submit_uid)
  local seconds = tonumber(config.timeout) or 2
  local socket_path = config.agent:match("^unix:(/.+)$")
  if config.direct == "auto" and posix ~= nil and socket_path ~= nil then
    return ask_socket(socket_path, job_json(job_desc, submit_uid), seconds)
  end
  local tmp = os.tmpname()
  if not safe_path(tmp) or not safe_path(config.python) or not safe_path(config.client) then
    if tmp then os.remove(tmp) end
    return nil, "unsafe temporary or configured path"
  end
  local file = io.open(tmp, "w")
  if not file then os.remove(tmp); return nil, "cannot write " .. tmp end
  file:write(job_json(job_desc, submit_uid))
  file:close()
  local agent = config.agent:match("^[%w%.:/_%-]+$") and config.agent or "127.0.0.1:6820"
  -- The client refuses an agent run by another user than slurmctld's, root or agent_uid.
  local uids = config.agent_uid:match("^[%d,]+$") and (" --agent-uid " .. config.agent_uid) or ""
  local command = string.format("timeout -k 1 %g %s -I -S %s --agent %s%s --timeout %g < '%s' 2>/dev/null",
    seconds, config.python, config.client, agent, uids, seconds, tmp)
  local pipe = io.popen(command, "r")
  local output = pipe and pipe:read("*a") or ""
  if pipe then pipe:close() end
  os.remove(tmp)
  local answer = parse_answer(output)
  if answer.action == nil then return nil, "no answer within " .. seconds .. " s" end
  return answer, nil
end

local function apply(job_desc, answer)
  for _, key in ipairs(answer.order) do
    local value = answer.set[key]
    if SETTABLE_NUMBER[key] then job_desc[key] = tonumber(value)
    elseif SETTABLE_STRING[key] then job_desc[key] = value end
  end
  -- Only variables sbatch already put in the job's environment are overwritten (srun reads them).
  local env = job_desc.environment
  if env ~= nil then
    for name, value in pairs(answer.env) do
      if name:match("^SLURM_GPUS") and env[name] ~= nil then env[name] = value end
    end
  end
end

-- Without the agent: a gpu:<model>:N request (model in model_features) becomes gpu:N + the model as
-- a node feature, so users' scripts keep working when GRES are typed per switch.
local function untype_models(job_desc)
  local models = {}
  for model in config.model_features:gmatch("[^,%s]+") do models[model:lower()] = model end
  local found = nil
  for _, key in ipairs({ "tres_per_node", "tres_per_job", "tres_per_task" }) do
    local value = job_desc[key]
    if type(value) == "string" then
      job_desc[key] = value:gsub("(gres[:/])gpu:([%w_%.%-]+):(%d+)", function(prefix, gtype, count)
        if models[gtype:lower()] then
          found = models[gtype:lower()]
          return prefix .. "gpu:" .. count
        end
        return nil
      end)
    end
  end
  if found == nil then return nil end
  local current = job_desc.features
  if current ~= nil and current ~= "" then
    job_desc.features = current .. "&" .. found
  else
    job_desc.features = found
  end
  return found
end

local function failed(reason)
  if config.fail_mode == "closed" then
    slurm.log_error("topoplace: refusing GPU job (fail_mode=closed): %s", reason)
    slurm.log_user("topoplace placement is unavailable (%s); GPU jobs are refused until it is back", reason)
    return slurm.ERROR
  end
  local model = untype_models(job_desc_being_submitted)
  local extra = model and ("; gpu:" .. model .. " asked as untyped GPUs with feature " .. model) or ""
  slurm.log_error("topoplace: job left unplanned (fail_mode=open): %s%s", reason, extra)
  slurm.log_user("topoplace could not plan this job (%s); Slurm places it as submitted%s", reason, extra)
  return slurm.SUCCESS
end

-- Why a heterogeneous job is not planned, said to the user as is (docs/slurm.md "Heterogeneous jobs").
local HET_WHY = "Slurm 22.05 hands job_submit.lua one component at a time, with no count of the "
  .. "components and no view of the others, so they cannot be planned together, and a component "
  .. "pinned on its own could hold nodes and GRES types its siblings need to start with it"

function slurm_job_submit(job_desc, part_list, submit_uid)
  load_config()
  if config.enabled ~= "yes" or not wants_gpus(job_desc) then return slurm.SUCCESS end
  job_desc_being_submitted = job_desc
  -- A heterogeneous job reaches this hook one component at a time (Slurm 22.05: het_job_offset 0, 1,
  -- …; NO_VAL for other jobs) with no count of components, so it cannot be planned whole here: it is
  -- left to Slurm, said to the user and the log (a gpu:<model> request still gets the model rewrite).
  local het_offset = tonumber(job_desc.het_job_offset)
  if het_offset ~= nil and het_offset < 4294967294 then
    local model = untype_models(job_desc)
    local extra = model and ("; gpu:" .. model .. " asked as untyped GPUs with feature " .. model) or ""
    slurm.log_info("topoplace: heterogeneous job component %d left to Slurm (%s)%s", het_offset, HET_WHY, extra)
    slurm.log_user("topoplace: heterogeneous job component %d is not planned (%s); Slurm places it as submitted%s",
      het_offset, HET_WHY, extra)
    return slurm.SUCCESS
  end
  local answer, err = ask_topoplace(job_desc, submit_uid)
  if answer == nil then return failed(err) end
  local message = answer.message or ""
  -- What was not planned (and why) reaches the user, not only slurmctld's log.
  if answer.notice ~= nil and answer.action ~= "never_fits" then slurm.log_user("%s", answer.notice) end
  if answer.action == "apply" then
    apply(job_desc, answer)
    slurm.log_info("%s", message)
    return slurm.SUCCESS
  elseif answer.action == "never_fits" then
    if config.refuse_never_fits == "yes" then
      slurm.log_info("%s", message)
      slurm.log_user("%s", message)
      return slurm.ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE or slurm.ERROR
    end
    slurm.log_info("%s (refuse_never_fits=no: left unchanged)", message)
    return slurm.SUCCESS
  elseif answer.action == "pass" then
    apply(job_desc, answer)  -- only what keeps the job valid as submitted (e.g. a GPU model rewrite)
    slurm.log_info("%s", message)
    return slurm.SUCCESS
  end
  return failed(message ~= "" and message or "error")
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  -- A modified job keeps its plan; re-planning on `scontrol update` is not done (documented).
  return slurm.SUCCESS
end

slurm.log_info("topoplace job_submit.lua loaded")
return slurm.SUCCESS
