// Measured positional acceptance (see acceptance_profile.h).
#include "src/speculative/acceptance_profile.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "src/model/fingerprint.h"
#include "src/util/error.h"
#include "src/util/io.h"

namespace redwood::spec {

using json = nlohmann::ordered_json;

AcceptanceCounter::AcceptanceCounter(Verifier v, int width) : v_(v), width_(width) {
  if (v != Verifier::kSequoia && v != Verifier::kSpecInfer && v != Verifier::kGreedy && v != Verifier::kTargetSample)
    throw Error(std::string("acceptance profiles measure sequoia, specinfer, greedy or target-sample, not ") +
                verifier_name(v));
  if (width < 1 || width > 4096) throw Error("acceptance width must be in [1, 4096], got " + std::to_string(width));
  sum_.assign(static_cast<size_t>(width) + 1, 0.0);
  sum_sq_.assign(static_cast<size_t>(width) + 1, 0.0);
}

void AcceptanceCounter::add(std::span<const float> p, std::span<const float> q, Rng& rng) {
  scratch_.assign(static_cast<size_t>(width_), 0.0);
  if (v_ == Verifier::kTargetSample) {
    // The draft's top-W children (deterministic, as OPT-Tree and SpecExec
    // build them); the target draws y ~ p and the child equal to y, if any,
    // is accepted: a_k = p(k-th child), exactly (distinct tokens exclude).
    const std::vector<int32_t> top = sample_children(Verifier::kGreedy, q, width_, rng);
    for (size_t k = 0; k < top.size(); ++k) scratch_[k] = p[static_cast<size_t>(top[k])];
    add_probabilities(scratch_);
    return;
  }
  const std::vector<int32_t> kids = sample_children(v_, q, width_, rng);
  nv_.begin(v_, p, q);
  double alive = 1;  // P(children 1..k-1 all rejected)
  for (size_t k = 0; k < kids.size(); ++k) {
    const double r = nv_.accept_probability(kids[k]);
    scratch_[k] = alive * r;
    alive *= 1 - r;
    if (!(alive > 0)) break;
    nv_.reject(kids[k]);
  }
  add_probabilities(scratch_);
}

void AcceptanceCounter::add_probabilities(std::span<const double> a) {
  if (a.size() != static_cast<size_t>(width_))
    throw Error("acceptance trial has " + std::to_string(a.size()) + " ranks, the counter " + std::to_string(width_));
  double none = 1;
  for (size_t k = 0; k < a.size(); ++k) {
    sum_[k] += a[k];
    sum_sq_[k] += a[k] * a[k];
    none -= a[k];
  }
  none = std::max(none, 0.0);
  sum_[a.size()] += none;
  sum_sq_[a.size()] += none * none;
  ++trials_;
}

AcceptanceVector AcceptanceCounter::result() const {
  AcceptanceVector r;
  r.verifier = v_;
  r.width = width_;
  r.trials = trials_;
  const double n = static_cast<double>(trials_);
  for (int k = 0; k <= width_; ++k) {
    const size_t i = static_cast<size_t>(k);
    const double mean = trials_ ? sum_[i] / n : 0.0;
    const double var = trials_ > 1 ? std::max(0.0, (sum_sq_[i] - n * mean * mean) / (n - 1)) : 0.0;
    const double half = trials_ ? 1.96 * std::sqrt(var / n) : 0.0;
    if (k == width_) {
      r.none = mean;
      break;
    }
    r.acceptance.push_back(mean);
    r.expected_counts.push_back(sum_[i]);
    r.ci95_low.push_back(std::max(0.0, mean - half));
    r.ci95_high.push_back(std::min(1.0, mean + half));
  }
  return r;
}

std::vector<double> ChainProfile::depth_acceptance() const {
  std::vector<double> out;
  for (size_t k = 1; k < reached.size(); ++k)
    out.push_back(reached[k - 1] > 0 ? static_cast<double>(reached[k]) / static_cast<double>(reached[k - 1]) : 0.0);
  return out;
}

FileIdentity identify_files(const std::string& name, const std::vector<std::string>& files) {
  FileIdentity id;
  id.path = name;
  std::vector<uint64_t> hashes;
  for (const std::string& f : files) {  // cached by file version, like the models' fingerprints
    require_regular_input(f, "a file to hash");
    const FileHash h = file_content_hash(f);
    id.bytes += h.bytes;
    hashes.push_back(h.xxh3);
  }
  const uint64_t h = hashes.size() == 1 ? hashes[0] : XXH3_64bits(hashes.data(), hashes.size() * sizeof(uint64_t));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  id.xxh3 = hex;
  return id;
}

std::vector<double> non_increasing(const std::vector<double>& a) {
  // Pool adjacent violators: blocks of (sum, count), merged while a later block's
  // mean exceeds an earlier one's.
  std::vector<std::pair<double, int>> blocks;
  for (double x : a) {
    blocks.push_back({x, 1});
    while (blocks.size() > 1) {
      const auto& b = blocks[blocks.size() - 1];
      const auto& c = blocks[blocks.size() - 2];
      if (b.first / b.second <= c.first / c.second) break;
      const std::pair<double, int> merged{b.first + c.first, b.second + c.second};
      blocks.pop_back();
      blocks.back() = merged;
    }
  }
  std::vector<double> out;
  for (const auto& [s, n] : blocks)
    for (int i = 0; i < n; ++i) out.push_back(std::max(0.0, s / n));
  return out;
}

namespace {

std::string g6(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", x);
  return b;
}

json identity_json(const FileIdentity& f) {
  return {{"path", f.path}, {"bytes", f.bytes}, {"xxh3", f.xxh3}};
}

}  // namespace

std::string profile_json(const AcceptanceProfile& p) {
  json j;
  j["format"] = "redwood-acceptance-profile";
  j["version"] = 1;
  j["acceptance"] = p.acceptance;
  j["target"] = identity_json(p.target);
  j["draft"] = identity_json(p.draft);
  j["prompts"] = identity_json(p.prompts);
  j["prompt_count"] = p.prompt_count;
  j["sampling"] = {{"temperature", p.temperature}, {"top_p", p.top_p}, {"top_k", p.top_k}, {"seed", p.seed}};
  j["positions"] = p.positions;
  j["repeats"] = p.repeats;
  json vs = json::object();
  for (const AcceptanceVector& v : p.vectors) {
    json ci = json::array();
    for (size_t k = 0; k < v.acceptance.size(); ++k) ci.push_back({v.ci95_low[k], v.ci95_high[k]});
    vs[verifier_name(v.verifier)] = {{"width", v.width}, {"trials", v.trials}, {"acceptance", v.acceptance},
                                     {"none", v.none},   {"ci95", ci},         {"expected_counts", v.expected_counts}};
  }
  j["one_level_trees"] = vs;
  j["chain"] = {{"depth", p.chain.depth},
                {"steps_reaching_depth", p.chain.reached},
                {"depth_acceptance", p.chain.depth_acceptance()}};
  return j.dump(2) + "\n";
}

AcceptanceProfile read_acceptance_profile(const std::string& path) {
  return parse_acceptance_profile(read_text_file(path, "the acceptance profile"), path);
}

AcceptanceProfile parse_acceptance_profile(const std::string& text, const std::string& name) {
  const json j = json::parse(text, nullptr, false);
  auto fail = [&](const std::string& m) { throw Error(name + ": " + m); };
  if (j.is_discarded()) fail("not valid JSON");
  if (!j.is_object()) fail("expected a JSON object");
  auto num = [&](const json& v, const std::string& what, double lo, double hi) {
    if (!v.is_number()) fail(what + " must be a number");
    const double x = v.get<double>();
    if (!(x >= lo && x <= hi)) fail(what + " must be in [" + g6(lo) + ", " + g6(hi) + "]");
    return x;
  };
  auto vec = [&](const json& v, const std::string& what) {
    if (!v.is_array() || v.empty()) fail(what + " must be a non-empty array of probabilities");
    std::vector<double> out;
    double sum = 0;
    for (size_t i = 0; i < v.size(); ++i)
      sum += out.emplace_back(num(v[i], what + "[" + std::to_string(i) + "]", 0, 1));
    if (sum > 1 + 1e-9) fail(what + " sums to " + g6(sum) + " > 1");
    return out;
  };
  AcceptanceProfile p;
  if (!j.contains("acceptance")) fail("missing \"acceptance\"");
  p.acceptance = vec(j["acceptance"], "acceptance");
  for (size_t k = 1; k < p.acceptance.size(); ++k)
    if (p.acceptance[k] > p.acceptance[k - 1] + 1e-12)
      fail("acceptance must be non-increasing (index " + std::to_string(k) + ")");
  if (!j.contains("format")) return p;  // a bare {"acceptance": [...]} file
  if (j["format"] != "redwood-acceptance-profile") fail("format must be \"redwood-acceptance-profile\"");
  if (!j.contains("version") || j["version"] != 1) fail("unsupported version (expected 1)");
  auto identity = [&](const char* key) {
    FileIdentity f;
    if (!j.contains(key) || !j[key].is_object()) fail(std::string(key) + " must be an object {path, bytes, xxh3}");
    const json& o = j[key];
    if (!o.contains("path") || !o["path"].is_string()) fail(std::string(key) + ".path must be a string");
    if (!o.contains("bytes") || !o["bytes"].is_number_unsigned()) fail(std::string(key) + ".bytes must be a count");
    if (!o.contains("xxh3") || !o["xxh3"].is_string() || o["xxh3"].get<std::string>().size() != 16)
      fail(std::string(key) + ".xxh3 must be 16 hex digits");
    f.path = o["path"];
    f.bytes = o["bytes"];
    f.xxh3 = o["xxh3"];
    return f;
  };
  p.target = identity("target");
  p.draft = identity("draft");
  p.prompts = identity("prompts");
  auto count = [&](const char* key) -> int64_t {
    if (!j.contains(key) || !j[key].is_number_unsigned()) fail(std::string(key) + " must be a non-negative integer");
    return j[key].get<int64_t>();
  };
  p.prompt_count = static_cast<int>(count("prompt_count"));
  p.positions = count("positions");
  p.repeats = static_cast<int>(count("repeats"));
  if (!j.contains("sampling") || !j["sampling"].is_object()) fail("sampling must be an object");
  const json& s = j["sampling"];
  p.temperature = num(s.value("temperature", json()), "sampling.temperature", 0, 100);
  p.top_p = num(s.value("top_p", json()), "sampling.top_p", 0, 1);
  p.top_k = static_cast<int>(num(s.value("top_k", json()), "sampling.top_k", 0, 1 << 24));
  if (!s.contains("seed") || !s["seed"].is_number_unsigned()) fail("sampling.seed must be a non-negative integer");
  p.seed = s["seed"];
  if (!j.contains("one_level_trees") || !j["one_level_trees"].is_object()) fail("one_level_trees must be an object");
  for (const auto& [key, v] : j["one_level_trees"].items()) {
    AcceptanceVector a;
    const std::string w = "one_level_trees." + key;
    try {
      a.verifier = parse_verifier(key);
    } catch (const Error&) {
      fail(w + ": unknown verifier");
    }
    if (!v.is_object()) fail(w + " must be an object");
    a.acceptance = vec(v.value("acceptance", json()), w + ".acceptance");
    a.width = static_cast<int>(a.acceptance.size());
    if (!v.contains("width") || v["width"] != a.width) fail(w + ".width must equal the acceptance length");
    if (!v.contains("trials") || !v["trials"].is_number_unsigned()) fail(w + ".trials must be a count");
    a.trials = v["trials"];
    a.none = num(v.value("none", json()), w + ".none", 0, 1);
    const json& ci = v.value("ci95", json());
    if (!ci.is_array() || ci.size() != a.acceptance.size()) fail(w + ".ci95 must have one [low, high] per rank");
    for (size_t k = 0; k < ci.size(); ++k) {
      if (!ci[k].is_array() || ci[k].size() != 2) fail(w + ".ci95[" + std::to_string(k) + "] must be [low, high]");
      a.ci95_low.push_back(num(ci[k][0], w + ".ci95 low", 0, 1));
      a.ci95_high.push_back(num(ci[k][1], w + ".ci95 high", 0, 1));
      if (a.ci95_low[k] > a.acceptance[k] + 1e-12 || a.ci95_high[k] < a.acceptance[k] - 1e-12)
        fail(w + ".ci95[" + std::to_string(k) + "] does not contain the estimate");
    }
    const json& ec = v.value("expected_counts", json());
    if (!ec.is_array() || ec.size() != a.acceptance.size()) fail(w + ".expected_counts must have one entry per rank");
    for (const auto& c : ec) a.expected_counts.push_back(num(c, w + ".expected_counts", 0, 1e18));
    p.vectors.push_back(std::move(a));
  }
  if (!j.contains("chain") || !j["chain"].is_object()) fail("chain must be an object");
  const json& c = j["chain"];
  if (!c.contains("depth") || !c["depth"].is_number_unsigned() || c["depth"].get<uint64_t>() > 4096)
    fail("chain.depth must be a count (at most 4096)");
  p.chain.depth = c["depth"];
  const json& r = c.value("steps_reaching_depth", json());
  if (!r.is_array() || r.size() != static_cast<size_t>(p.chain.depth) + 1)
    fail("chain.steps_reaching_depth must have depth + 1 counts");
  for (size_t k = 0; k < r.size(); ++k) {
    if (!r[k].is_number_unsigned()) fail("chain.steps_reaching_depth must hold counts");
    p.chain.reached.push_back(r[k]);
    if (k > 0 && p.chain.reached[k] > p.chain.reached[k - 1]) fail("chain.steps_reaching_depth must be non-increasing");
  }
  return p;
}

}  // namespace redwood::spec
