#include "model/streams.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace sc::model::streams {

namespace {

void add_unique(std::vector<int>& v, const std::vector<int>& more) {
  for (int x : more) {
    if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
  }
}

}  // namespace

Program::Program() : stream_names_{"host"}, frontier_(1) {}

int Program::add_stream(const std::string& name) {
  stream_names_.push_back(name);
  frontier_.emplace_back();
  return static_cast<int>(stream_names_.size()) - 1;
}

void Program::close_over(int op) {
  const auto n = static_cast<size_t>(op) + 1;
  std::vector<bool> before(n, false);
  for (int p : preds_[static_cast<size_t>(op)]) {
    before[static_cast<size_t>(p)] = true;
    const std::vector<bool>& pb = before_[static_cast<size_t>(p)];
    for (size_t a = 0; a < pb.size(); ++a) {
      if (pb[a]) before[a] = true;
    }
  }
  before_.push_back(std::move(before));
}

int Program::enqueue(Op op) {
  const int i = static_cast<int>(ops_.size());
  const auto s = static_cast<size_t>(op.stream);
  if (s >= frontier_.size()) throw std::out_of_range("enqueue on an unknown stream");
  std::vector<int> preds = frontier_[s].ops;
  if (op.stream != kHost) add_unique(preds, frontier_[kHost].ops);
  const bool sync = op.host_synchronous;
  ops_.push_back(std::move(op));
  preds_.push_back(std::move(preds));
  close_over(i);
  frontier_[s].ops = {i};
  if (sync && s != kHost) add_unique(frontier_[kHost].ops, {i});
  return i;
}

int Program::record_event(int stream) {
  events_.push_back(frontier_.at(static_cast<size_t>(stream)));
  return static_cast<int>(events_.size()) - 1;
}

void Program::wait_event(int stream, int event) {
  add_unique(frontier_.at(static_cast<size_t>(stream)).ops,
             events_.at(static_cast<size_t>(event)).ops);
}

void Program::wait_stream(int waiter, int waited) { wait_event(waiter, record_event(waited)); }

void Program::synchronize_event(int event) {
  add_unique(frontier_[kHost].ops, events_.at(static_cast<size_t>(event)).ops);
}

void Program::synchronize_all() {
  for (size_t s = 1; s < frontier_.size(); ++s) add_unique(frontier_[kHost].ops, frontier_[s].ops);
}

bool Program::happens_before(int first, int second) const {
  if (first == second || first < 0 || second < 0) return false;
  const std::vector<bool>& bb = before_.at(static_cast<size_t>(second));
  return static_cast<size_t>(first) < bb.size() && bb[static_cast<size_t>(first)];
}

std::vector<bool> Program::required_by_host() const {
  std::vector<bool> req(ops_.size(), false);
  for (int f : frontier_[kHost].ops) {
    req[static_cast<size_t>(f)] = true;
    const std::vector<bool>& fb = before_[static_cast<size_t>(f)];
    for (size_t a = 0; a < fb.size(); ++a) {
      if (fb[a]) req[a] = true;
    }
  }
  return req;
}

std::vector<Race> Program::races() const {
  std::vector<Race> out;
  auto overlap = [](const std::vector<Region>& x, const std::vector<Region>& y, Region& at) {
    for (const Region& r : x) {
      for (const Region& q : y) {
        if (r.overlaps(q)) {
          at = Region{r.buffer, std::max(r.begin, q.begin), std::min(r.end, q.end)};
          return true;
        }
      }
    }
    return false;
  };
  for (size_t b = 0; b < ops_.size(); ++b) {
    for (size_t a = 0; a < b; ++a) {
      if (happens_before(static_cast<int>(a), static_cast<int>(b))) continue;
      Region at;
      const Op& x = ops_[a];
      const Op& y = ops_[b];
      if (overlap(x.writes, y.writes, at) || overlap(x.writes, y.reads, at) ||
          overlap(x.reads, y.writes, at)) {
        out.push_back(Race{static_cast<int>(a), static_cast<int>(b), at});
      }
    }
  }
  return out;
}

std::string describe(const Program& program, const Race& race) {
  auto one = [&](int i) {
    const Op& op = program.ops()[static_cast<size_t>(i)];
    std::ostringstream os;
    os << "#" << i << " \"" << op.what << "\" on " << program.stream_name(op.stream);
    return os.str();
  };
  std::ostringstream os;
  os << one(race.first) << " and " << one(race.second) << " both touch " << race.region.buffer
     << " [" << race.region.begin << ", " << race.region.end
     << ") and neither happens before the other";
  return os.str();
}

}  // namespace sc::model::streams
