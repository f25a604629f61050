#include "src/runtime/session_settings.h"

#include "src/runtime/model.h"
#include "src/util/error.h"
#include "src/util/io.h"
#include "src/util/parse.h"

namespace redwood::runtime {

namespace {
// The speculation flags given without --draft (they would be ignored).
std::string spec_flags_without_draft(const SessionSettings& o) {
  std::string given;
  if (!o.s.draft.empty() || !o.given) return given;
  for (const char* f : {"--tree", "--verify", "--budget", "--depth", "--threshold", "--delta", "--width",
                        "--is-alphabet", "--acceptance", "--hardware-profile"})
    if (o.given(f)) given += (given.empty() ? "" : ", ") + std::string(f);
  return given;
}

// The tree/verifier flags as make_spec_config's plain values.
spec::TreeOptions tree_options(const SessionSettings& o) {
  spec::TreeOptions t;
  t.tree = o.tree;
  t.budget = parse_int_arg(o.budget, "--budget", 1, 8192);
  t.depth = parse_int_arg(o.depth, "--depth", 1, 1024);
  if (!o.threshold.empty()) t.threshold = parse_double_arg(o.threshold, "--threshold");
  if (!o.delta.empty()) t.delta = parse_double_arg(o.delta, "--delta");
  if (!o.width.empty()) t.width = parse_int_arg(o.width, "--width", 1, 4096);
  if (!o.is_alphabet.empty()) t.is_alphabet = parse_int_arg(o.is_alphabet, "--is-alphabet", 1, 1 << 24);
  t.verifier = o.verify;
  t.acceptance = o.acceptance;
  return t;
}
}  // namespace

void make_session(SessionSettings& o, std::optional<Session>& session, const std::function<void()>& checks,
                  const std::function<void()>& late_checks) {
  std::vector<std::string> inputs = {o.s.draft, o.acceptance, o.s.hardware_profile};
  if (o.tree.rfind("sequoia:", 0) == 0) inputs.push_back(o.tree.substr(8));
  inputs.insert(inputs.end(), o.inputs.begin(), o.inputs.end());
  apply_run_options(o.s.run, inputs);
  validate(o.s.sampling);
  if (checks) checks();
  if (const std::string f = spec_flags_without_draft(o); !f.empty())
    throw Error(f + ": speculative decoding needs --draft MODEL");
  check_draft_budget(o.s.run, o.s.draft);
  if (late_checks) late_checks();
  const bool auto_tree = !o.s.draft.empty() && o.tree == "auto";
  if (!o.s.hardware_profile.empty() && !auto_tree)
    throw Error("--hardware-profile is only for --draft ... --tree auto");
  // Profiles given are read late (after weights load, --tree auto after measuring): not a FIFO or device.
  if (!o.acceptance.empty()) require_regular_input(o.acceptance, "an acceptance file");
  if (!o.s.hardware_profile.empty()) require_regular_input(o.s.hardware_profile, "a hardware profile");
  if (!o.s.draft.empty()) o.s.tree = tree_options(o);  // flags parsed before any model loads
  if (const spec::TreeOptions& t = o.s.tree;
      auto_tree && (t.threshold || t.delta || t.width || !t.verifier.empty() || t.is_alphabet))
    throw Error(
        "--tree auto chooses the tree, its parameters and its verifier: it takes only --budget and --depth "
        "(caps), --acceptance and --hardware-profile");
  try {
    session.emplace(o.s);
  } catch (const runtime::SetupError& e) {
    if (e.key() == "draft") throw Error(o.s.draft + ": " + e.what());
    throw;
  }
}

}  // namespace redwood::runtime
