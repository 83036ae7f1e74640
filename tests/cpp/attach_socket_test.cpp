// The transport of `bvlua attach` (attach/socket.h): frames over a Unix socket in a temp dir,
// stale and foreign files at the socket's path, long paths, the socket's mode, the cheap
// per-step check, and refusing another user (by pretending this process is not the owner).
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "attach/socket.h"
#include "test_util.h"

namespace {

using bv::attach::Connection;
using bv::attach::Event;
using bv::attach::Frame;
using bv::attach::Listener;
using bv::attach::ReadResult;
using bv::test::contains;
using bv::test::error_of;
using bv::test::TempDir;

// Polls until `done(events so far)` or 5 seconds have passed.
std::vector<Event> poll_until(Listener& l,
                              const std::function<bool(const std::vector<Event>&)>& done) {
  std::vector<Event> all;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!done(all) && std::chrono::steady_clock::now() < until) {
    for (Event& e : l.poll(0.05)) all.push_back(std::move(e));
  }
  return all;
}

size_t count(const std::vector<Event>& events, Event::Kind kind) {
  size_t n = 0;
  for (const Event& e : events) n += e.kind == kind;
  return n;
}

// The next frame on `c`, waiting up to 5 seconds; nullopt when the peer closed first.
std::optional<Frame> recv_frame(Connection& c) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < until) {
    if (auto f = c.next_frame()) return f;
    if (c.fill(0.05) == ReadResult::kClosed) return c.next_frame();
  }
  return std::nullopt;
}

// The id of the connection the first kConnected event reports.
int connected_id(Listener& l) {
  auto events = poll_until(l, [](const auto& ev) { return count(ev, Event::Kind::kConnected); });
  REQUIRE(count(events, Event::Kind::kConnected) == 1);
  return events[0].id;
}

// A socket file that nobody listens on, as a killed run leaves it.
void make_stale_socket(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, path.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  ::close(fd);
}

std::string frame_bytes(char kind, const std::string& payload) {
  uint32_t n = static_cast<uint32_t>(payload.size());
  std::string out = {kind, static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                     static_cast<char>(n >> 8), static_cast<char>(n)};
  return out + payload;
}

void write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    REQUIRE(n > 0);
    done += static_cast<size_t>(n);
  }
}

}  // namespace

TEST_CASE("attach socket: frames round-trip both ways, empty and 1 MB ones, split across writes",
          "[attach]") {
  TempDir dir("bv_attach");
  Listener l(dir / "attach.sock");
  CHECK(l.note().empty());
  Connection client(bv::attach::connect_to(dir / "attach.sock"));
  int id = connected_id(l);

  std::string big(1 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + i / 251);
  // Raw bytes in uneven pieces: a header cut in two, a payload cut anywhere.
  std::string bytes = frame_bytes('C', "x = 1") + frame_bytes('E', "") + frame_bytes('B', big);
  std::thread writer([&] {
    for (size_t at = 0, piece = 3; at < bytes.size(); at += piece, piece = piece * 3 + 1) {
      write_all(client.fd(), bytes.substr(at, piece));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  auto events = poll_until(l, [](const auto& ev) { return count(ev, Event::Kind::kFrame) == 3; });
  writer.join();
  REQUIRE(count(events, Event::Kind::kFrame) == 3);
  CHECK(events[0].id == id);
  CHECK(events[0].frame_kind == 'C');
  CHECK(events[0].text == "x = 1");
  CHECK(events[1].frame_kind == 'E');
  CHECK(events[1].text.empty());
  CHECK(events[2].frame_kind == 'B');
  CHECK(events[2].text == big);

  // The other way: a 1 MB send blocks until the client reads, so it runs on a thread.
  std::thread sender([&] {
    CHECK(l.send(id, 'O', big));
    CHECK(l.send(id, 'D', ""));
  });
  auto first = recv_frame(client);
  auto second = recv_frame(client);
  sender.join();
  REQUIRE(first);
  CHECK(first->kind == 'O');
  CHECK(first->payload == big);
  REQUIRE(second);
  CHECK(second->kind == 'D');
  CHECK(second->payload.empty());

  // The client leaves: one kClosed, then sending to it fails.
  client.close();
  events = poll_until(l, [](const auto& ev) { return count(ev, Event::Kind::kClosed); });
  REQUIRE(count(events, Event::Kind::kClosed) == 1);
  CHECK(events.back().id == id);
  CHECK(events.back().text.empty());
  CHECK_FALSE(l.send(id, 'O', "anyone?"));
}

TEST_CASE("attach socket: a stale socket file is replaced with a note, other files are refused",
          "[attach]") {
  TempDir dir("bv_attach");
  std::string path = dir / "attach.sock";
  make_stale_socket(path);
  CHECK(contains(error_of([&] { bv::attach::connect_to(path); }),
                 path + " is a stale socket: the run that made it is gone"));
  Listener l(path);
  CHECK(l.note() ==
        "replaced a stale attach socket at " + path + " (left by a run that did not exit cleanly)");
  Connection client(bv::attach::connect_to(path));
  connected_id(l);

  std::string file = dir / "file.sock";
  bv::test::write_bytes(file, "not a socket");
  std::string msg = error_of([&] { Listener other(file); });
  CHECK(contains(msg, file));
  CHECK(contains(msg, "a regular file"));
  CHECK(bv::test::read_bytes(file) == "not a socket");  // left alone
  CHECK(contains(error_of([&] { bv::attach::connect_to(file); }), file + " is not a socket"));

  std::string sub = dir / "subdir";
  REQUIRE(::mkdir(sub.c_str(), 0700) == 0);
  CHECK(contains(error_of([&] { Listener other(sub); }), "a directory"));
}

TEST_CASE("attach socket: connect_to names what is wrong with the path", "[attach]") {
  TempDir dir("bv_attach");
  std::string missing = dir / "none.sock";
  CHECK(contains(error_of([&] { bv::attach::connect_to(missing); }),
                 "no run is listening: " + missing + " does not exist"));
  std::string deep = dir / "no/such/dir/attach.sock";
  CHECK(contains(error_of([&] { bv::attach::connect_to(deep); }), deep + " does not exist"));
}

TEST_CASE("attach socket: a path longer than sun_path works, the file is mode 0600", "[attach]") {
  TempDir dir("bv_attach");
  std::string sub = dir.path;
  while (sub.size() < 150) {
    sub += "/a_rather_long_directory_name";
    REQUIRE(::mkdir(sub.c_str(), 0755) == 0);
  }
  std::string path = sub + "/attach.sock";
  REQUIRE(path.size() > sizeof(sockaddr_un::sun_path));
  Listener l(path);
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 07777) == 0600);
  Connection client(bv::attach::connect_to(path));
  int id = connected_id(l);
  CHECK(client.send('C', "hello"));
  auto events = poll_until(l, [](const auto& ev) { return count(ev, Event::Kind::kFrame); });
  REQUIRE(count(events, Event::Kind::kFrame) == 1);
  CHECK(events[0].id == id);
  CHECK(events[0].text == "hello");
  l.close();
  CHECK(::lstat(path.c_str(), &st) != 0);
}

TEST_CASE("attach socket: pending() is false when idle, true once a client connects or writes",
          "[attach]") {
  TempDir dir("bv_attach");
  Listener l(dir / "attach.sock");
  CHECK_FALSE(l.pending());
  Connection client(bv::attach::connect_to(dir / "attach.sock"));
  CHECK(l.pending());
  connected_id(l);
  CHECK_FALSE(l.pending());
  REQUIRE(client.send('C', "print(1)"));
  CHECK(l.pending());
  auto events = poll_until(l, [](const auto& ev) { return count(ev, Event::Kind::kFrame); });
  CHECK(count(events, Event::Kind::kFrame) == 1);
  CHECK_FALSE(l.pending());
  client.close();
  CHECK(l.pending());
  events = poll_until(l, [](const auto& ev) { return count(ev, Event::Kind::kClosed); });
  CHECK(count(events, Event::Kind::kClosed) == 1);
  CHECK_FALSE(l.pending());
}

TEST_CASE("attach socket: close() unlinks the socket only while it is still this listener's",
          "[attach]") {
  TempDir dir("bv_attach");
  std::string path = dir / "attach.sock";
  struct stat st {};
  {
    Listener l(path);
    l.close();
    CHECK(::lstat(path.c_str(), &st) != 0);
    l.close();  // idempotent
  }
  Listener first(path);
  Listener second(path);  // replaces first's file, as a later run would
  CHECK(contains(second.note(), "replaced a stale attach socket"));
  first.close();
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  Connection client(bv::attach::connect_to(path));
  connected_id(second);
  second.close();
  CHECK(::lstat(path.c_str(), &st) != 0);
}

TEST_CASE("attach socket: another user is sent an X frame and reported as refused", "[attach]") {
  TempDir dir("bv_attach");
  int me = static_cast<int>(::geteuid());
  Listener l(dir / "attach.sock", me + 1);  // this process plays the other user
  Connection client(bv::attach::connect_to(dir / "attach.sock"));
  auto events = poll_until(l, [](const auto& ev) { return count(ev, Event::Kind::kRefused); });
  REQUIRE(events.size() == 1);
  const Event& e = events[0];
  CHECK(e.kind == Event::Kind::kRefused);
  CHECK(e.uid == me);
  CHECK(e.pid == static_cast<int>(::getpid()));
  std::string want = "refused: this run belongs to " + bv::attach::user_name(me + 1) + " (uid " +
                     std::to_string(me + 1) + "); " + bv::attach::user_name(me) + " (uid " +
                     std::to_string(me) + ", pid " + std::to_string(::getpid()) +
                     ") may not attach to it";
  CHECK(e.text == want);
  auto f = recv_frame(client);
  REQUIRE(f);
  CHECK(f->kind == 'X');
  CHECK(f->payload == want);
  CHECK(client.fill(1.0) == ReadResult::kClosed);
  CHECK_FALSE(l.pending());
}

TEST_CASE("attach socket: interrupt_requested takes an I frame and leaves the others for poll",
          "[attach]") {
  TempDir dir("bv_attach");
  Listener l(dir / "attach.sock");
  Connection client(bv::attach::connect_to(dir / "attach.sock"));
  int id = connected_id(l);
  CHECK_FALSE(l.interrupt_requested(id));
  REQUIRE(client.send('C', "a"));
  REQUIRE(client.send('I', ""));
  REQUIRE(client.send('C', "b"));
  bool interrupted = false;
  for (int i = 0; i < 500 && !interrupted; ++i) {
    interrupted = l.interrupt_requested(id);
    if (!interrupted) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(interrupted);
  CHECK_FALSE(l.interrupt_requested(id));  // taken once
  CHECK(l.pending());                      // "a" and "b" wait in the buffer
  auto events = poll_until(l, [](const auto& ev) { return count(ev, Event::Kind::kFrame) == 2; });
  REQUIRE(events.size() == 2);
  CHECK(events[0].text == "a");
  CHECK(events[1].text == "b");
  CHECK_FALSE(l.peer_gone(id));
  client.close();
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) gone = l.interrupt_requested(id);
  CHECK(gone);
  CHECK(l.peer_gone(id));
  CHECK(l.interrupt_requested(12345));  // an unknown id: nobody is there to wait for
}

TEST_CASE("attach socket: a frame over 64 MiB is refused on both ends", "[attach]") {
  TempDir dir("bv_attach");
  Listener l(dir / "attach.sock");
  Connection client(bv::attach::connect_to(dir / "attach.sock"));
  int id = connected_id(l);
  std::string huge(bv::attach::kMaxPayload + 1, 'x');
  CHECK(contains(error_of([&] { client.send('C', huge); }), "over the limit"));
  write_all(client.fd(), std::string("C\x7f\xff\xff\xff", 5));  // a header that announces 2 GiB
  auto events = poll_until(l, [](const auto& ev) { return count(ev, Event::Kind::kClosed); });
  REQUIRE(count(events, Event::Kind::kClosed) == 1);
  CHECK(events.back().id == id);
  CHECK(contains(events.back().text, "announced a frame of 2147483647 bytes"));
  auto f = recv_frame(client);
  REQUIRE(f);
  CHECK(f->kind == 'X');
  CHECK(contains(f->payload, "attach protocol"));
}
