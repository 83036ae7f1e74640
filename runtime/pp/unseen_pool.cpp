#include "pp/unseen_pool.h"

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "core/error.h"

namespace bv::pp {

namespace {

struct Entry {
  int64_t n = 0;
  std::vector<int64_t> left;  // the items not drawn yet in this round
};

struct Pool {
  std::mutex mu;
  std::map<std::pair<std::string, std::string>, Entry> entries;
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: worker threads may outlive static teardown
  return *p;
}

}  // namespace

int64_t take_unseen(const std::string& scope, const std::string& id, int64_t n, Rng& rng) {
  BV_CHECK(n > 0, "take_unseen: needs at least one item to choose from, got ", n);
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  Entry& e = p.entries[{scope, id}];
  if (e.n != n || e.left.empty()) {
    e.n = n;
    e.left.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) e.left[static_cast<size_t>(i)] = i;
  }
  auto j = static_cast<size_t>(rng.integer(0, static_cast<int64_t>(e.left.size()) - 1));
  int64_t out = e.left[j];
  e.left[j] = e.left.back();
  e.left.pop_back();
  return out;
}

int64_t forget_unseen(const std::string& prefix) {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  int64_t dropped = 0;
  for (auto it = p.entries.begin(); it != p.entries.end();) {
    if (it->first.first.compare(0, prefix.size(), prefix) == 0) {
      it = p.entries.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

}  // namespace bv::pp
