#include "src/jobs/summary.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace redwood::jobs {

using nlohmann::json;

ResultTotals total_results(const std::string& output, const std::unordered_set<std::string>& wanted) {
  ResultTotals t;
  std::vector<double> spt;
  for (const json& r : read_results(output)) {
    if (!wanted.count(r["id"].dump())) continue;
    ++t.done;
    t.finish_reasons[r["finish_reason"].get<std::string>()]++;
    if (r.contains("n_tokens") && r["n_tokens"].is_number_integer()) t.tokens += r["n_tokens"].get<int64_t>();
    const json& mt = r.value("metrics", json::object());
    if (mt.contains("s_per_token") && mt["s_per_token"].is_number() && r.value("n_tokens", 0) > 0)
      spt.push_back(mt["s_per_token"].get<double>());
    t.decode_seconds += mt.value("seconds", 0.0);
    t.draft_seconds += mt.value("draft_seconds", 0.0);
    t.verify_seconds += mt.value("verify_seconds", 0.0);
    t.stall_seconds += mt.value("stall_seconds", 0.0);
    t.streamed_passes += mt.value("streamed_passes", int64_t{0});
    t.stream_wall_seconds += mt.value("stream_wall_seconds", 0.0);
    t.stream_compute_seconds += mt.value("stream_compute_seconds", 0.0);
    t.io_seconds += mt.value("io_seconds", 0.0);
    t.storage_bytes += mt.value("storage_bytes", uint64_t{0});
    t.host_bytes += mt.value("host_bytes", uint64_t{0});
    t.peak_rss_bytes = std::max<uint64_t>(t.peak_rss_bytes, mt.value("peak_rss_bytes", uint64_t{0}));
    if (mt.contains("target_passes") && mt["target_passes"].is_number_integer()) {
      t.target_passes += mt["target_passes"].get<int64_t>();
      // emitted = accepted + bonus per step, as in the line's mean_accepted
      t.emitted += std::llround(mt.value("mean_accepted", 0.0) * mt["target_passes"].get<double>());
      t.tree_nodes += mt.value("mean_tree_nodes", 0.0) * mt["target_passes"].get<double>();
    }
  }
  t.s_per_token = percentiles(spt);
  return t;
}

json summary_json(const ResultTotals& t, const RunFacts& f) {
  const Percentiles& pc = t.s_per_token;
  const double wall = f.wall_seconds;
  return {
      {"job", f.job},
      {"output", f.output},
      {"complete", t.done == f.prompts},
      {"interrupted", f.interrupted},
      {"prompts",
       {{"total", f.prompts},
        {"bad_lines", f.bad_lines},
        {"done", t.done},
        {"done_this_run", f.done_this_run},
        {"already_done", f.already_done},
        {"remaining", f.prompts - t.done}}},
      {"tokens", t.tokens},
      {"tokens_this_run", f.tokens_this_run},
      {"wall_seconds_this_run", wall},
      {"tokens_per_second_this_run", wall > 0 ? static_cast<double>(f.tokens_this_run) / wall : 0.0},
      {"s_per_token", {{"p50", pc.p50}, {"p90", pc.p90}, {"p99", pc.p99}, {"mean", pc.mean}}},
      {"mean_accepted",
       t.target_passes ? json(static_cast<double>(t.emitted) / static_cast<double>(t.target_passes)) : json(nullptr)},
      {"decode_seconds", t.decode_seconds},
      {"s_per_token_overall", t.tokens ? t.decode_seconds / static_cast<double>(t.tokens) : 0.0},
      {"target_passes", t.target_passes},
      {"mean_tree_nodes", t.target_passes ? json(t.tree_nodes / static_cast<double>(t.target_passes)) : json(nullptr)},
      {"draft_seconds", t.draft_seconds},
      {"verify_seconds", t.verify_seconds},
      {"streamed_passes", t.streamed_passes},
      {"stall_seconds", t.stall_seconds},
      {"streamed",
       {{"wall_seconds", t.stream_wall_seconds},
        {"compute_seconds", t.stream_compute_seconds},
        {"io_seconds", t.io_seconds},
        {"storage_bytes", t.storage_bytes},
        {"host_bytes", t.host_bytes}}},
      {"peak_rss_bytes", t.peak_rss_bytes},
      {"finish_reasons", t.finish_reasons},
      {"config", f.config}};
}

}  // namespace redwood::jobs
