-- What the bvlua subcommands written in Lua share (runs, sweep, plot, mistakes): the exit codes
-- and messages of a usage error and of a failure, and reading an option's value.
--   function M.main(argv) return cli.run("plot", M.USAGE, main, argv) end
local M = {}

-- A usage error: the message and the usage on stderr; exit code 2.
function M.usage_error(name, usage, msg)
  io.stderr:write("bvlua ", name, ": ", msg, "\n", usage, "\n")
  return 2
end

-- Runs main(argv) and returns its exit code. An error raised with M.usage(msg) is a usage error
-- (code 2); any other error is printed as "bvlua NAME: message" (code 1).
function M.run(name, usage, main, argv)
  local ok, result = pcall(main, argv or {})
  if ok then return result end
  if type(result) == "table" and result.usage then
    return M.usage_error(name, usage, result.usage)
  end
  io.stderr:write("bvlua ", name, ": ", tostring(result), "\n")
  return 1
end

-- Raises a usage error (M.run turns it into code 2 with the usage).
function M.usage(msg) error({usage = msg}, 0) end

-- The value of option argv[i] (argv[i + 1]), or a usage error naming the option.
function M.value(argv, i)
  return argv[i + 1] or M.usage(argv[i] .. " needs a value")
end

-- The value of option argv[i] as a whole number >= 0, or a usage error.
function M.count(argv, i)
  local n = math.tointeger(tonumber(M.value(argv, i)))
  if not n or n < 0 then M.usage(argv[i] .. " wants a whole number") end
  return n
end

return M
