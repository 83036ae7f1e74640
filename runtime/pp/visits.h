// What big_vision's choice_no_replacement needs: which item an example gets on its k-th visit.
// big_vision counts visits per example id in host memory (its TODO wishes the pipeline gave an
// epoch instead); bvlua's pipeline does give one: a source visits each of its examples exactly
// once per epoch, so an example's k-th visit is the k-th epoch of its source. The item is then a
// pure function of (seed, op, example id, k), and so the same whatever the number of workers or
// their timing, on resume, and in every process.
#pragma once

#include <cstdint>
#include <string>

namespace bv::pp {

// The item (0..n-1) for visit `visit` (0-based) of example `id` under op `scope`: position
// visit % n of a random order of the n items drawn for round visit / n from (seed, scope, id).
// Every item comes once per round, in a new order each round. n must be > 0, visit >= 0.
int64_t shuffled_item(uint64_t seed, const std::string& scope, const std::string& id, int64_t visit,
                      int64_t n);

// For calls outside a data pipeline (the REPL, tests), which know no epoch: counts the calls
// for (scope, id) in this process, as big_vision's counter does; returns the count before this
// call (0 the first time). Thread-safe.
int64_t count_visit(const std::string& scope, const std::string& id);

// Forgets the counts of every scope whose name starts with `prefix` ("" forgets all); returns
// how many (scope, id) entries were dropped.
int64_t forget_visits(const std::string& prefix);

}  // namespace bv::pp
