#include "src/planner/profile_cache.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <cstdio>
#include <filesystem>

#include "src/util/error.h"

namespace redwood::planner {

std::string profile_key(const std::vector<std::string>& files, const std::string& extra) {
  std::string s;
  for (const std::string& f : files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0) throw Error(f + ": cannot stat");
    s += std::filesystem::absolute(f).string() + "|" + std::to_string(st.st_size) + "|" +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ";";
  }
  s += extra;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH3_64bits(s.data(), s.size())));
  return hex;
}

std::string sampling_key(const SamplingParams& sp) {
  char key[96];
  std::snprintf(key, sizeof key, "T=%.6g;top_p=%.6g;top_k=%d", sp.temperature, sp.top_p, sp.top_k);
  return key;
}

std::string acceptance_cache_path(const std::string& dir, const std::vector<std::string>& files,
                                  const SamplingParams& sp) {
  // "|v2": profiles since the target-sample scheme was added (older ones lack it).
  return dir + "/acceptance-" + profile_key(files, sampling_key(sp) + "|v2") + ".json";
}

std::string hardware_cache_path(const std::string& dir, const std::vector<std::string>& files, const HardwareKey& k) {
  std::string plan = "resident";
  if (k.plan) {
    plan.clear();
    for (const offload::Tier t : k.plan->layer_tier) plan += static_cast<char>('0' + static_cast<int>(t));
    plan.append("|").append(std::to_string(k.plan->ring_slots)).append("x").append(std::to_string(k.plan->slot_bytes));
  }
  std::string extra = k.backend;
  for (const std::string& part : {k.device_mem, k.host_mem, std::to_string(k.ring), std::to_string(k.threads),
                                  std::to_string(k.max_pass), plan, k.kv_type})
    extra.append("|").append(part);
  return dir + "/hardware-" + profile_key(files, extra) + ".json";
}

std::string dynamic_cache_path(const std::string& dir, const std::vector<std::string>& files, const SamplingParams& sp,
                               int max_budget, int max_depth, int positions, const std::string& rank1) {
  // Not the run's seed: the profile is measured with fixed seeds ("|v3"; v2 had the seed in the key).
  return dir + "/dynamic-" +
         profile_key(files, sampling_key(sp) + "|" + std::to_string(max_budget) + "|" + std::to_string(max_depth) +
                                "|" + std::to_string(positions) + rank1 + "|v3") +
         ".json";
}

}  // namespace redwood::planner
