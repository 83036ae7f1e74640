-- The timed loop the bench's bvlua sides share (bench_train.lua, bench_paligemma.lua; their
-- Python peers have the same in bench_timing.py): runs step() `steps` times after the caller's
-- warm-up and prints the line scripts/bench reads, "steps/s faults sys": steps per second, minor
-- page faults per step (memory given back to the OS and faulted in again), and the kernel's
-- share of the CPU time. finish (optional) waits for the work step() queued on a GPU.
return function(step, steps, finish)
  local t0, u0 = bv.clock(), bv.usage()
  for _ = 1, steps do step() end
  if finish then finish() end
  local t1, u1 = bv.clock(), bv.usage()
  local cpu = (u1.user_s + u1.system_s) - (u0.user_s + u0.system_s)
  print(string.format("%.3f %d %.3f", steps / (t1 - t0),
                      (u1.minor_faults - u0.minor_faults) // steps,
                      (u1.system_s - u0.system_s) / math.max(cpu, 1e-9)))
end
