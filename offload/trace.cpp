#include "offload/trace.h"

#include <nlohmann/json.hpp>

namespace redwood::offload {

void Trace::add(Track track, std::string name, Clock::time_point begin, Clock::time_point end, uint64_t bytes) {
  using us = std::chrono::duration<double, std::micro>;
  Event e{track, std::move(name), us(begin - t0_).count(), us(end - begin).count(), bytes};
  std::lock_guard lock(mu_);
  events_.push_back(std::move(e));
}

size_t Trace::size() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

std::string Trace::json() const {
  nlohmann::json ev = nlohmann::json::array();
  const std::pair<Track, const char*> names[] = {
      {kIo, "I/O"}, {kCompute, "compute"}, {kStall, "stall (waiting for I/O)"}};
  for (const auto& [tid, name] : names) {
    ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", tid}, {"args", {{"name", name}}}});
    ev.push_back(
        {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 1}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
  }
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", "redwood layer pipeline"}}}});
  std::lock_guard lock(mu_);
  for (const Event& e : events_) {
    nlohmann::json j = {{"name", e.name}, {"ph", "X"},     {"pid", 1},
                        {"tid", e.track}, {"ts", e.ts_us}, {"dur", e.dur_us}};
    if (e.bytes) j["args"] = {{"bytes", e.bytes}};
    ev.push_back(std::move(j));
  }
  return nlohmann::json{{"traceEvents", ev}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

}  // namespace redwood::offload
