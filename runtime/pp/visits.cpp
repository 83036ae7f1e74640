#include "pp/visits.h"

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/pipeline.h"

namespace bv::pp {

namespace {

// FNV-1a: a hash that is the same on every machine and run (std::hash promises neither).
uint64_t fnv1a(const std::string& s, uint64_t h = 0xcbf29ce484222325ULL) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

struct Counts {
  std::mutex mu;
  std::map<std::pair<std::string, std::string>, int64_t> visits;
};

Counts& counts() {
  static Counts* c = new Counts();  // never destroyed: worker threads may outlive static teardown
  return *c;
}

}  // namespace

int64_t shuffled_item(uint64_t seed, const std::string& scope, const std::string& id, int64_t visit,
                      int64_t n) {
  BV_CHECK(n > 0, "shuffled_item: needs at least one item to choose from, got ", n);
  BV_CHECK(visit >= 0, "shuffled_item: the visit must be >= 0, got ", visit);
  // The id is hashed after a separator byte so that ("ab", "c") and ("a", "bc") differ.
  uint64_t key = fnv1a(id, fnv1a(std::string(1, '\0'), fnv1a(scope)));
  uint64_t round = static_cast<uint64_t>(visit / n);
  Rng rng(data::mix_seed(seed, data::mix_seed(key, round)));
  // Fisher-Yates, stopped once position visit % n is fixed.
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  int64_t want = visit % n;
  for (int64_t i = 0; i <= want; ++i) {
    int64_t j = rng.integer(i, n - 1);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order[static_cast<size_t>(want)];
}

int64_t count_visit(const std::string& scope, const std::string& id) {
  Counts& c = counts();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.visits[{scope, id}]++;
}

int64_t forget_visits(const std::string& prefix) {
  Counts& c = counts();
  std::lock_guard<std::mutex> lock(c.mu);
  int64_t dropped = 0;
  for (auto it = c.visits.begin(); it != c.visits.end();) {
    if (it->first.first.compare(0, prefix.size(), prefix) == 0) {
      it = c.visits.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

}  // namespace bv::pp
