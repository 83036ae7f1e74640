#include "core/notes.h"

#include <atomic>
#include <mutex>
#include <utility>

namespace bv {

namespace {

std::mutex g_mutex;
std::vector<std::string> g_notes;
std::atomic<bool> g_any{false};

}  // namespace

void post_note(std::string line) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_notes.push_back(std::move(line));
  g_any = true;
}

std::vector<std::string> take_notes() {
  if (!g_any) return {};
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::string> out = std::move(g_notes);
  g_notes.clear();
  g_any = false;
  return out;
}

}  // namespace bv
