#include "src/planner/hardware.h"

#include <fstream>
#include <map>
#include <sstream>

#include "src/util/error.h"
#include "src/util/toml_section.h"
#include "src/util/toml_util.h"

namespace redwood::planner {

HardwareProfile parse_hardware(std::string_view text, const std::string& name) {
  using config::require, config::Section, config::size;
  const toml::table root = config::parse_toml(text, name);
  std::map<std::string, int> lines;
  const Section s(name, lines, &root, "");
  s.only({"name", "source", "kind", "device_memory", "device_reserved", "host_memory", "device_bandwidth",
          "link_bandwidth", "storage_bandwidth", "tflops", "bandwidth_efficiency", "flops_efficiency",
          "layer_overhead_us", "decode_bandwidth"});
  require(name, s,
          {"name", "kind", "device_memory", "device_bandwidth", "link_bandwidth", "storage_bandwidth", "tflops"});
  HardwareProfile h;
  h.file = name;
  s.str("name", h.name);
  s.str("source", h.source);
  std::string kind;
  s.choice("kind", kind, {"gpu", "cpu"});
  h.backend = kind == "cpu" ? offload::BackendKind::kCpu : offload::BackendKind::kCuda;
  size(name, root, s, "device_memory", h.device_memory);
  size(name, root, s, "device_reserved", h.device_reserved);
  size(name, root, s, "host_memory", h.host_memory);
  if (h.device_memory == 0) s.fail("device_memory", *root.get("device_memory"), "must be positive");
  if (h.device_reserved >= h.device_memory)
    s.fail("device_reserved", *root.get("device_reserved"), "must be less than device_memory");
  constexpr double kBig = 1e9;
  s.number("device_bandwidth", h.device_bandwidth, 0, kBig, true);
  s.number("link_bandwidth", h.link_bandwidth, 0, kBig, true);
  s.number("storage_bandwidth", h.storage_bandwidth, 0, kBig, true);
  s.number("tflops", h.tflops, 0, kBig, true);
  s.number("bandwidth_efficiency", h.bandwidth_efficiency, 0, 1, true);
  s.number("flops_efficiency", h.flops_efficiency, 0, 1, true);
  s.number("layer_overhead_us", h.layer_overhead_us, 0, 1e6);
  s.number("decode_bandwidth", h.decode_bandwidth, 0, kBig);
  return h;
}

HardwareProfile load_hardware(const std::string& path) {
  return parse_hardware(read_text_file(path, "hardware profile"), path);
}

}  // namespace redwood::planner
