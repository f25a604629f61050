// A Chrome trace (chrome://tracing, Perfetto) of the layer pipeline: one
// track for I/O (storage reads, host->device copies), one for compute (each
// layer from the moment its weights are ready until it is released), one for
// stalls (compute waiting for I/O). Thread-safe; events are kept in memory
// rendered once by json().
#pragma once
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

namespace redwood::offload {

class Trace {
 public:
  enum Track { kIo = 1, kCompute = 2, kStall = 3 };
  using Clock = std::chrono::steady_clock;

  Trace() : t0_(Clock::now()) {}
  // One complete event [begin, end) on a track; bytes (if non-zero) goes into args.
  void add(Track track, std::string name, Clock::time_point begin, Clock::time_point end, uint64_t bytes = 0);
  size_t size() const;
  std::string json() const;  // the CLI writes it with write_output_file

 private:
  struct Event {
    Track track;
    std::string name;
    double ts_us, dur_us;
    uint64_t bytes;
  };
  Clock::time_point t0_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
};

}  // namespace redwood::offload
