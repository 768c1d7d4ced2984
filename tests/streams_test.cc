// The stream model's happens-before rules (model/streams.h), one literal program each, and its
// race rule: what CUDA orders is never a race, what it leaves unordered is.
#include <gtest/gtest.h>

#include "model/streams.h"

namespace sc::model::streams {
namespace {

Op op(int stream, const char* what, std::vector<Region> reads, std::vector<Region> writes,
      bool host_synchronous = false) {
  return Op{stream, what, std::move(reads), std::move(writes), host_synchronous};
}

const Region kA{"a", 0, 8};
const Region kAHigh{"a", 8, 16};
const Region kB{"b", 0, 8};

TEST(StreamModel, OneStreamRunsInOrder) {
  Program p;
  const int s = p.add_stream("s");
  const int w = p.enqueue(op(s, "write a", {}, {kA}));
  const int r = p.enqueue(op(s, "read a", {kA}, {}));
  EXPECT_TRUE(p.happens_before(w, r));
  EXPECT_FALSE(p.happens_before(r, w));
  EXPECT_TRUE(p.races().empty());
}

TEST(StreamModel, TwoStreamsWithoutAnEventRace) {
  Program p;
  const int s = p.add_stream("s"), t = p.add_stream("t");
  const int w = p.enqueue(op(s, "write a", {}, {kA}));
  const int r = p.enqueue(op(t, "read a", {kA}, {}));
  EXPECT_FALSE(p.happens_before(w, r));
  const auto races = p.races();
  ASSERT_EQ(races.size(), 1u);
  EXPECT_EQ(races[0].first, w);
  EXPECT_EQ(races[0].second, r);
  EXPECT_EQ(races[0].region.buffer, "a");
  EXPECT_NE(describe(p, races[0]).find("on s and #1 \"read a\" on t"), std::string::npos);
}

TEST(StreamModel, DisjointRegionsAndTwoReadsNeverRace) {
  Program p;
  const int s = p.add_stream("s"), t = p.add_stream("t");
  p.enqueue(op(s, "write low", {}, {kA}));
  p.enqueue(op(t, "write high", {}, {kAHigh}));
  p.enqueue(op(s, "read b", {kB}, {}));
  p.enqueue(op(t, "read b", {kB}, {}));
  EXPECT_TRUE(p.races().empty());
}

TEST(StreamModel, WaitStreamOrdersWhatWasEnqueuedBeforeOnly) {
  Program p;
  const int s = p.add_stream("s"), t = p.add_stream("t");
  const int w = p.enqueue(op(s, "write a", {}, {kA}));
  p.wait_stream(t, s);
  const int late = p.enqueue(op(s, "write a again", {}, {kA}));
  const int r = p.enqueue(op(t, "read a", {kA}, {}));
  EXPECT_TRUE(p.happens_before(w, r));
  EXPECT_FALSE(p.happens_before(late, r));
  ASSERT_EQ(p.races().size(), 1u);
  EXPECT_EQ(p.races()[0].first, late);
}

TEST(StreamModel, AnEventOnAnotherStreamDoesNotOrder) {
  // HDO-01's shape: the copy runs on h2d, the event is recorded on d2h.
  Program p;
  const int d2h = p.add_stream("d2h"), h2d = p.add_stream("h2d"), cur = p.add_stream("cur");
  const int copy = p.enqueue(op(h2d, "H2D copy", {kB}, {kA}));
  p.wait_event(cur, p.record_event(d2h));
  const int use = p.enqueue(op(cur, "read a", {kA}, {}));
  EXPECT_FALSE(p.happens_before(copy, use));
  EXPECT_EQ(p.races().size(), 1u);
}

TEST(StreamModel, EventsCarryWhatTheirStreamWaitedFor) {
  Program p;
  const int s = p.add_stream("s"), t = p.add_stream("t"), u = p.add_stream("u");
  const int w = p.enqueue(op(s, "write a", {}, {kA}));
  p.wait_stream(t, s);             // t has no work of its own
  p.wait_event(u, p.record_event(t));
  const int r = p.enqueue(op(u, "read a", {kA}, {}));
  EXPECT_TRUE(p.happens_before(w, r));
}

TEST(StreamModel, HostSynchronizeOrdersLaterHostWorkAndLaterLaunches) {
  Program p;
  const int s = p.add_stream("s"), t = p.add_stream("t");
  const int w = p.enqueue(op(s, "D2H copy", {kB}, {kA}));
  const int e = p.record_event(s);
  const int before = p.enqueue(op(Program::kHost, "host reads a too early", {kA}, {}));
  p.synchronize_event(e);
  const int host = p.enqueue(op(Program::kHost, "host step", {kA}, {kA}));
  const int launch = p.enqueue(op(t, "later launch", {kA}, {}));
  EXPECT_FALSE(p.happens_before(w, before));
  EXPECT_TRUE(p.happens_before(w, host));
  EXPECT_TRUE(p.happens_before(host, launch));
  EXPECT_TRUE(p.happens_before(w, launch));
  ASSERT_EQ(p.races().size(), 1u);
  EXPECT_EQ(p.races()[0].second, before);
}

TEST(StreamModel, HostWorkPrecedesEverythingEnqueuedAfterItButNotBefore) {
  Program p;
  const int s = p.add_stream("s");
  const int early = p.enqueue(op(s, "read a", {kA}, {}));
  const int host = p.enqueue(op(Program::kHost, "host writes a", {}, {kA}));
  const int late = p.enqueue(op(s, "read a later", {kA}, {}));
  EXPECT_FALSE(p.happens_before(early, host));
  EXPECT_TRUE(p.happens_before(host, late));
  ASSERT_EQ(p.races().size(), 1u);
  EXPECT_EQ(p.races()[0].first, early);
}

TEST(StreamModel, APageableCopyIsSynchronousForTheHost) {
  Program p;
  const int s = p.add_stream("s");
  const int pinned = p.enqueue(op(s, "pinned copy", {kB}, {kA}));
  const int after_pinned = p.enqueue(op(Program::kHost, "host reads a", {kA}, {}));
  const int pageable = p.enqueue(op(s, "pageable copy", {kA}, {kB}, true));
  const int after_pageable = p.enqueue(op(Program::kHost, "host reads b", {kB}, {}));
  EXPECT_FALSE(p.happens_before(pinned, after_pinned));
  EXPECT_TRUE(p.happens_before(pageable, after_pageable));
  EXPECT_TRUE(p.happens_before(pinned, after_pageable));  // the stream's order, then the host's
}

TEST(StreamModel, RequiredByHostIsTheClosureOfWhatItSynchronized) {
  Program p;
  const int s = p.add_stream("s"), t = p.add_stream("t");
  const int a = p.enqueue(op(s, "a", {}, {kA}));
  const int b = p.enqueue(op(t, "b", {}, {kB}));
  const int e = p.record_event(s);
  EXPECT_FALSE(p.required_by_host()[static_cast<size_t>(a)]);
  p.synchronize_event(e);
  EXPECT_TRUE(p.required_by_host()[static_cast<size_t>(a)]);
  EXPECT_FALSE(p.required_by_host()[static_cast<size_t>(b)]);
  p.synchronize_all();
  EXPECT_TRUE(p.required_by_host()[static_cast<size_t>(b)]);
}

}  // namespace
}  // namespace sc::model::streams
