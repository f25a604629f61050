#include "src/speculative/generation.h"

#include <algorithm>

#include "src/util/clock.h"
#include "src/util/error.h"

namespace redwood::spec {

namespace {

// Accumulates text, cuts it at the first stop string, and releases only text
// that no stop string can still claim.
class TextSink {
 public:
  TextSink(const std::vector<std::string>& stop, const std::function<void(std::string_view)>& out)
      : stop_(stop), out_(out) {
    for (const auto& s : stop_) hold_ = std::max(hold_, s.empty() ? size_t{0} : s.size() - 1);
  }
  // Returns true when a stop string was found (the text is cut before it).
  bool push(const std::string& piece) {
    const size_t from = text_.size() > hold_ ? text_.size() - hold_ : 0;
    text_ += piece;
    size_t cut = std::string::npos;
    for (const auto& s : stop_) {
      if (s.empty()) continue;
      const size_t at = text_.find(s, from);
      if (at != std::string::npos) cut = std::min(cut, at);
    }
    if (cut != std::string::npos) {
      text_.resize(cut);
      release(text_.size());
      return true;
    }
    release(text_.size() > hold_ ? text_.size() - hold_ : 0);
    return false;
  }
  void finish() { release(text_.size()); }
  std::string take() { return std::move(text_); }

 private:
  void release(size_t upto) {
    if (upto <= sent_) return;
    if (out_) out_(std::string_view(text_).substr(sent_, upto - sent_));
    sent_ = upto;
  }
  const std::vector<std::string>& stop_;
  const std::function<void(std::string_view)>& out_;
  std::string text_;
  size_t hold_ = 0, sent_ = 0;
};

}  // namespace

int generation_capacity(const GenerationRequest& req, const DraftSetup* draft) {
  int cap = static_cast<int>(req.prompt.size()) + req.max_tokens + 1;
  if (draft) cap += draft->config.max_tree_nodes() + 2;
  return cap;
}

Generation generate(Transformer& target, const Tokenizer& tok, const GenerationRequest& req, const DraftSetup* draft,
                    const std::function<void(std::string_view)>& on_text, const std::function<bool()>& cancelled) {
  if (req.prompt.empty()) throw Error("the prompt encodes to no tokens");
  if (req.max_tokens < 1) throw Error("max_tokens must be >= 1");
  Generation g;
  g.finish = "length";
  Utf8Stream utf8;
  TextSink sink(req.stop, on_text);
  // Emits one token; returns false when generation must stop.
  bool cut = false;  // a stop string ended the text
  auto emit = [&](int32_t t) {
    if (static_cast<int>(g.tokens.size()) >= req.max_tokens) return false;
    if (tok.is_eog(t)) {
      g.finish = "stop";
      return false;
    }
    g.tokens.push_back(t);
    if (sink.push(utf8.push(tok.token_bytes(t)))) {
      g.finish = "stop";
      cut = true;
      return false;
    }
    return static_cast<int>(g.tokens.size()) < req.max_tokens;
  };
  auto stop_requested = [&] { return cancelled && cancelled(); };

  const int capacity = generation_capacity(req, draft);
  double t1 = 0;
  if (!draft) {
    KvCache kv = target.make_cache(capacity);
    Sampler sampler(req.sampling);
    std::vector<float> logits(static_cast<size_t>(target.hparams().vocab));
    const double t0 = now_seconds();
    prefill(target, kv, req.prompt, req.prefill_chunk, logits);
    g.prefill_seconds = now_seconds() - t0;
    t1 = now_seconds();
    while (true) {
      if (stop_requested()) {
        g.finish = "cancelled";
        break;
      }
      const int32_t t = sampler.sample(logits);
      if (!emit(t)) break;
      const int32_t pos = kv.committed();
      const int32_t parent = -1;
      target.forward(Batch{{&t, 1}, {&pos, 1}, {&parent, 1}}, kv, logits, LogitsRows::kLast);
      kv.commit_prefix(1);
    }
  } else {
    SpecConfig cfg = draft->config;
    cfg.sampling = req.sampling;
    cfg.prefill_chunk = req.prefill_chunk;
    SpecDecoder dec(target, *draft->draft, *draft->target_desc, *draft->draft_desc, cfg, capacity);
    const double t0 = now_seconds();
    dec.start(req.prompt);
    g.prefill_seconds = now_seconds() - t0;
    t1 = now_seconds();
    bool go = true;
    while (go) {
      if (stop_requested()) {
        g.finish = "cancelled";
        break;
      }
      for (int32_t t : dec.step())
        if (!(go = emit(t))) break;
    }
    g.spec = dec.stats();
  }
  if (!cut) {
    if (sink.push(utf8.flush()))
      g.finish = "stop";
    else
      sink.finish();
  }
  g.text = sink.take();
  g.decode_seconds = now_seconds() - t1;
  return g;
}

}  // namespace redwood::spec
