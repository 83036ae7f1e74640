# The timed loop the bench's Python peers share (bench_train_peer.py, bench_paligemma_peer.py;
# the bvlua sides have the same in bench_timing.lua): runs step() `steps` times after the
# caller's warm-up and prints "steps/s faults sys": steps per second, minor page faults per step
# and the kernel's share of the CPU time.
import resource
import time


def usage():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_stime, r.ru_minflt


def time_steps(step, steps, finish=None):
    t0, u0 = time.perf_counter(), usage()
    for _ in range(steps):
        step()
    if finish:
        finish()  # a GPU's queued work (torch.cuda.synchronize)
    t1, u1 = time.perf_counter(), usage()
    print("%.3f %d %.3f" % (steps / (t1 - t0), (u1[2] - u0[2]) / steps,
                            (u1[1] - u0[1]) / max(u1[0] - u0[0], 1e-9)))
