// A model of CUDA streams for one host thread: what the host enqueued, in order, and the
// happens-before relation that the streams, events and host synchronisations define.
//
// Rules (CUDA's): operations on one stream run in the order they were enqueued; an event
// recorded on a stream completes after everything enqueued there before it (including what that
// stream was made to wait for); an operation enqueued on a stream after wait_event(e) runs after
// e completes; the host blocks in synchronize until the event completes, so everything it does or
// enqueues afterwards happens after; a host operation runs when the host reaches it, after every
// earlier host operation, and every operation enqueued after it starts after it. A copy between
// the device and pageable host memory is synchronous for the host.
//
// Two operations conflict (a race) when they touch overlapping regions of one buffer, at least
// one writes, and neither happens before the other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sc::model::streams {

// Elements (or bytes) [begin, end) of a named buffer.
struct Region {
  std::string buffer;
  int64_t begin = 0;
  int64_t end = 0;
  bool overlaps(const Region& other) const {
    return buffer == other.buffer && begin < other.end && other.begin < end;
  }
};

// One operation: a kernel or copy on a stream, or work done by the host itself.
struct Op {
  int stream = 0;  // Program::kHost for host work
  std::string what;
  std::vector<Region> reads, writes;
  bool host_synchronous = false;  // the host waits for it (a copy with pageable memory)
};

// Two operations that conflict: `first` enqueued before `second`.
struct Race {
  int first = 0, second = 0;
  Region region;  // the overlap
};

// How to order the operations that happens-before leaves free.
enum class Policy {
  kEager,        // every operation as soon as it is enqueued (program order)
  kRandom,       // a random choice among the ready ones, from a seed
  kAdversarial,  // as late as legal: an operation runs only when something that must follow it
                 // does (a host synchronisation, a host operation, the end), newest ready first
};

class Program {
 public:
  static constexpr int kHost = 0;

  Program();
  // A new stream named `name`; returns its index (the host is stream 0).
  int add_stream(const std::string& name);
  const std::string& stream_name(int stream) const {
    return stream_names_.at(static_cast<size_t>(stream));
  }
  // Enqueues `op` (on the host: runs it); returns its index.
  int enqueue(Op op);
  // Records an event on stream `stream`; returns its index.
  int record_event(int stream);
  // Operations enqueued on `stream` from now on run after event `event`.
  void wait_event(int stream, int event);
  // wait_event(waiter, record_event(waited)).
  void wait_stream(int waiter, int waited);
  // The host blocks until event `event` completes.
  void synchronize_event(int event);
  // The host blocks until everything enqueued so far completes.
  void synchronize_all();

  const std::vector<Op>& ops() const { return ops_; }
  // True when operation `first` happens before operation `second`.
  bool happens_before(int first, int second) const;
  // Every conflicting pair, first by `second` then by `first`.
  std::vector<Race> races() const;
  // The operations that must have run before the host goes on from its current point (the
  // closure of what it synchronised on and its own earlier work).
  std::vector<bool> required_by_host() const;
  // Direct predecessors of operation i.
  const std::vector<int>& predecessors(int i) const { return preds_.at(static_cast<size_t>(i)); }

 private:
  struct Frontier {
    std::vector<int> ops;  // operations that must complete before the next one here
  };
  void close_over(int op);

  std::vector<std::string> stream_names_;
  std::vector<Op> ops_;
  std::vector<std::vector<int>> preds_;
  std::vector<std::vector<bool>> before_;  // before_[b][a]: a happens before b
  std::vector<Frontier> frontier_;         // per stream; [kHost] is the host's
  std::vector<Frontier> events_;
};

// Human-readable description of `race`, a race of `program`.
std::string describe(const Program& program, const Race& race);

}  // namespace sc::model::streams
