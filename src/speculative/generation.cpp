#include "src/speculative/generation.h"

#include <algorithm>

#include "src/util/clock.h"
#include "src/util/error.h"

namespace redwood::spec {

OutputStream::OutputStream(const Tokenizer& tok, int max_tokens, std::vector<std::string> stop,
                           std::function<void(std::string_view)> on_text)
    : tok_(tok), max_tokens_(max_tokens), stop_(std::move(stop)), on_text_(std::move(on_text)) {
  for (const auto& s : stop_) hold_ = std::max(hold_, s.empty() ? size_t{0} : s.size() - 1);
  g_.finish = "length";
}

bool OutputStream::emit(int32_t t) {
  if (static_cast<int>(g_.tokens.size()) >= max_tokens_) return false;
  if (tok_.is_eog(t)) {
    g_.finish = "stop";
    return false;
  }
  g_.tokens.push_back(t);
  if (push(utf8_.push(tok_.token_bytes(t)))) {
    g_.finish = "stop";
    cut_ = true;
    return false;
  }
  return static_cast<int>(g_.tokens.size()) < max_tokens_;
}

void OutputStream::finish() {
  if (!cut_) {
    if (push(utf8_.flush()))
      g_.finish = "stop";
    else
      release(g_.text.size());
  }
}

bool OutputStream::push(const std::string& piece) {
  std::string& text = g_.text;
  const size_t from = text.size() > hold_ ? text.size() - hold_ : 0;
  text += piece;
  size_t cut = std::string::npos;
  for (const auto& s : stop_) {
    if (s.empty()) continue;
    const size_t at = text.find(s, from);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut != std::string::npos) {
    text.resize(cut);
    release(text.size());
    return true;
  }
  release(text.size() > hold_ ? text.size() - hold_ : 0);
  return false;
}

void OutputStream::release(size_t upto) {
  if (upto <= sent_) return;
  if (on_text_) on_text_(std::string_view(g_.text).substr(sent_, upto - sent_));
  sent_ = upto;
}

void check_request(const GenerationRequest& req) {
  if (req.prompt.empty()) throw Error("the prompt encodes to no tokens");
  if (req.max_tokens < 1) throw Error("max_tokens must be >= 1");
}

int generation_capacity(const GenerationRequest& req, const DraftSetup* draft) {
  int cap = static_cast<int>(req.prompt.size()) + req.max_tokens + 1;
  if (draft) cap += draft->config.max_tree_nodes() + 2;
  return cap;
}

Generation generate(Transformer& target, const Tokenizer& tok, const GenerationRequest& req, const DraftSetup* draft,
                    const std::function<void(std::string_view)>& on_text, const std::function<bool()>& cancelled) {
  check_request(req);
  OutputStream out(tok, req.max_tokens, req.stop, on_text);
  Generation& g = out.generation();
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
      if (!out.emit(t)) break;
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
        if (!(go = out.emit(t))) break;
    }
    g.spec = dec.stats();
  }
  out.finish();
  g.decode_seconds = now_seconds() - t1;
  return std::move(g);
}

}  // namespace redwood::spec
