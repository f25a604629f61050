// The measured cost model's file and curves (see measured.h).
#include "src/planner/measured.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "src/util/error.h"
#include "src/util/io.h"

namespace redwood::planner {

using json = nlohmann::ordered_json;

double CostCurve::at(double v) const {
  if (x.empty() || x.size() != seconds.size()) throw Error("cost curve is empty");
  // Larger passes never cost less: timing noise that makes a later point
  // cheaper is flattened (running maximum), and beyond the grid the last
  // segment's slope continues only upwards.
  std::vector<double> y(seconds.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = i == 0 ? seconds[0] : std::max(y[i - 1], seconds[i]);
  if (x.size() == 1 || v <= x.front()) return y.front();
  size_t i = 1;
  while (i + 1 < x.size() && v > x[i]) ++i;  // segment [i-1, i] (the last one beyond the grid)
  const double x0 = x[i - 1], x1 = x[i], y0 = y[i - 1], y1 = y[i];
  return y0 + (y1 - y0) * (v - x0) / (x1 - x0);
}

namespace {

json identity(const spec::FileIdentity& f) {
  return {{"path", f.path}, {"bytes", f.bytes}, {"xxh3", f.xxh3}};
}

json curve(const CostCurve& c, const char* xname) {
  json a = json::array();
  for (size_t i = 0; i < c.x.size(); ++i) a.push_back({{xname, c.x[i]}, {"seconds", c.seconds[i]}});
  return a;
}

}  // namespace

std::string measured_json(const MeasuredProfile& p) {
  json j;
  j["format"] = "redwood-hardware-profile";
  j["version"] = 1;
  j["target"] = identity(p.target);
  j["draft"] = identity(p.draft);
  j["config"] = {{"backend", p.backend}, {"device_mem", p.device_mem}, {"host_mem", p.host_mem},
                 {"ring", p.ring},       {"threads", p.threads},       {"ctx", p.ctx},
                 {"prefix", p.prefix}};
  j["layers"] = {{"resident", p.layers_resident}, {"host", p.layers_host}, {"streamed", p.layers_streamed}};
  j["timing"] = {{"warmup", p.warmup}, {"repeats", p.repeats}, {"statistic", "median"}};
  j["target_pass"] = curve(p.target_pass, "n");
  j["draft_level"] = curve(p.draft_level, "width");
  return j.dump(2) + "\n";
}

MeasuredProfile read_measured(const std::string& path) {
  return parse_measured(read_text_file(path, "the hardware profile"), path);
}

MeasuredProfile parse_measured(const std::string& text, const std::string& name) {
  const json j = json::parse(text, nullptr, false);
  auto fail = [&](const std::string& m) { throw Error(name + ": " + m); };
  if (j.is_discarded()) fail("not valid JSON");
  if (!j.is_object()) fail("expected a JSON object");
  if (j.value("format", json()) != "redwood-hardware-profile") fail("format must be \"redwood-hardware-profile\"");
  if (j.value("version", json()) != 1) fail("unsupported version (expected 1)");
  MeasuredProfile p;
  auto ident = [&](const char* key) {
    const json& o = j.value(key, json());
    if (!o.is_object() || !o.value("path", json()).is_string() || !o.value("bytes", json()).is_number_unsigned() ||
        !o.value("xxh3", json()).is_string() || o["xxh3"].get<std::string>().size() != 16)
      fail(std::string(key) + " must be {path, bytes, xxh3 (16 hex digits)}");
    return spec::FileIdentity{o["path"], o["bytes"], o["xxh3"]};
  };
  p.target = ident("target");
  p.draft = ident("draft");
  const json& c = j.value("config", json());
  if (!c.is_object()) fail("config must be an object");
  auto str = [&](const json& o, const char* key, const std::string& where) {
    if (!o.value(key, json()).is_string()) fail(where + key + " must be a string");
    return o[key].get<std::string>();
  };
  auto count = [&](const json& o, const char* key, const std::string& where, int lo) {
    const json& v = o.value(key, json());
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > (1 << 24))
      fail(where + key + " must be an integer >= " + std::to_string(lo));
    return v.get<int>();
  };
  p.backend = str(c, "backend", "config.");
  p.device_mem = str(c, "device_mem", "config.");
  p.host_mem = str(c, "host_mem", "config.");
  p.ring = count(c, "ring", "config.", 2);
  p.threads = count(c, "threads", "config.", 1);
  p.ctx = count(c, "ctx", "config.", 1);
  p.prefix = count(c, "prefix", "config.", 0);
  const json& l = j.value("layers", json());
  if (!l.is_object()) fail("layers must be an object");
  p.layers_resident = count(l, "resident", "layers.", 0);
  p.layers_host = count(l, "host", "layers.", 0);
  p.layers_streamed = count(l, "streamed", "layers.", 0);
  const json& t = j.value("timing", json());
  if (!t.is_object()) fail("timing must be an object");
  p.warmup = count(t, "warmup", "timing.", 0);
  p.repeats = count(t, "repeats", "timing.", 1);
  auto read_curve = [&](const char* key, const char* xname) {
    const json& a = j.value(key, json());
    if (!a.is_array() || a.empty()) fail(std::string(key) + " must be a non-empty array");
    CostCurve cv;
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string w = std::string(key) + "[" + std::to_string(i) + "].";
      if (!a[i].is_object()) fail(std::string(key) + "[" + std::to_string(i) + "] must be an object");
      const int x = count(a[i], xname, w, 1);
      if (!cv.x.empty() && x <= cv.x.back()) fail(w + xname + " must be increasing");
      const json& s = a[i].value("seconds", json());
      if (!s.is_number() || !(s.get<double>() > 0) || !std::isfinite(s.get<double>()))
        fail(w + "seconds must be a positive number");
      cv.x.push_back(x);
      cv.seconds.push_back(s.get<double>());
    }
    return cv;
  };
  p.target_pass = read_curve("target_pass", "n");
  p.draft_level = read_curve("draft_level", "width");
  return p;
}

}  // namespace redwood::planner
