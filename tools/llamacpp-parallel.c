// llama.cpp's continuous batching, doing the work of one Redwood batch job, for
// bench/llamacpp_parallel.sh (issue 44): N prompts, at most PARALLEL of them in
// flight, each decoded greedily (or sampled at TEMP) until an end-of-generation token or
// MAX_TOKENS generated tokens (the end token is not counted, as Redwood does not count it).
// Every step is ONE llama_decode of one llama_batch: the next token of each
// sequence in flight (seq_id = its slot) plus the whole prompt of each sequence
// admitted into a free slot; a finished sequence's KV rows are removed
// (llama_memory_seq_rm) and its slot takes the next prompt at the next step.
// llama.cpp's examples do not do this work: llama-parallel draws prompts at
// random, wraps them in its own "User:/Assistant:" text and stops at "User:";
// llama-batched runs one prompt copied into every sequence.
//
//   llamacpp-parallel MODEL.gguf PROMPTS PARALLEL MAX_TOKENS OUT.jsonl [THREADS [KV_MIB [TEMP]]]
//
// PROMPTS: the prompt texts (chat template already applied), each ended by a NUL
// byte; tokenized with the model's BOS rule and special tokens parsed.
// OUT.jsonl: one line per prompt, as it finishes (index: its place in PROMPTS):
//   {"index", "prompt_tokens", "n_tokens", "finish_reason": "stop"|"length", "tokens", "text"}
// written to OUT.jsonl.part and renamed when all are done, so a failed run leaves no OUT.jsonl.
// stdout: one JSON line: tokens (generated), wall_seconds (first decode to the
// last token, prefill included; loading excluded), tokens_per_second, steps,
// max_in_flight, n_ctx, kv_mib, load_seconds.
// The KV cache is F16 (llama.cpp's default; Redwood's shared_passes.sh uses f16) and
// unified (one pool of cells for all sequences), allocated whole when the context is
// made: n_ctx = the sum of prompt + MAX_TOKENS - 1 over the PARALLEL longest prompts
// (rounded up to 256 cells by llama.cpp), the most that PARALLEL sequences in flight
// can hold at once, and no more. One ubatch holds the largest possible step (the
// PARALLEL longest prompts admitted together, plus a token per sequence): each step
// reads the weights once. Only the rows sampled from are output (n_outputs_max).
// TEMP > 0 (default 0: greedy, the first of equal logits) samples from the softmax at TEMP
// (llama.cpp's temp and dist samplers, no top-k/top-p, as Redwood with top_k = 0, top_p = 1),
// seeded with 1 + the prompt's index.
// KV_MIB > 0 (default 0: the worst case above) gives the cache that many MiB instead (n_ctx rounded down to 256 cells), and
// a prompt is admitted, in order, only when the cells that the sequences in flight may
// still need (prompt + MAX_TOKENS - 1 each) leave room for its own: fewer in flight, no
// failure mid-job. Cells are counted as F16 K and V rows of n_embd / n_head x n_head_kv
// per layer.
//
// Not part of Redwood: compiled by the bench script against the llama.cpp build
// in build/llamacpp (as tools/llamacpp-logits.c is by its test), never linked
// into the runtime. Exit 1 with one line on stderr on any error.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static char last_error[512];  // llama.cpp's last error line, named by fail()

static void quiet(enum ggml_log_level level, const char* text, void* user) {
  (void)user;
  if (level != GGML_LOG_LEVEL_ERROR) return;
  snprintf(last_error, sizeof last_error, "%s", text);
  last_error[strcspn(last_error, "\n")] = 0;
}

static char* part = NULL;  // the output being written, removed on failure

static int fail(const char* msg, const char* what) {
  if (part) remove(part);
  fprintf(stderr, "llamacpp-parallel: %s%s%s%s%s%s\n", msg, what ? ": " : "", what ? what : "",
          *last_error ? " (llama.cpp: " : "", last_error, *last_error ? ")" : "");
  return 1;
}

static int parse_count(const char* s, int* out) {
  char* end = NULL;
  const long v = strtol(s, &end, 10);
  if (end == s || *end || v < 1 || v > 1000000) return 0;
  *out = (int)v;
  return 1;
}

// The whole file, NUL-terminated; NULL on a read error.
static char* read_all(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char* buf = malloc(cap + 1);
  for (size_t got; (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
  }
  const int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return NULL;
  }
  buf[n] = 0;
  *size = n;
  return buf;
}

static void json_string(FILE* f, const char* s, size_t n) {
  fputc('"', f);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c == '\n')
      fputs("\\n", f);
    else if (c == '\t')
      fputs("\\t", f);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

static int longer_first(const void* a, const void* b) {
  return *(const int*)b - *(const int*)a;
}

static void add(struct llama_batch* b, llama_token token, llama_pos pos, llama_seq_id seq, int output) {
  const int i = b->n_tokens++;
  b->token[i] = token;
  b->pos[i] = pos;
  b->n_seq_id[i] = 1;
  b->seq_id[i][0] = seq;
  b->logits[i] = (int8_t)output;
}

struct slot {
  int prompt;           // index of its prompt, -1 when free
  int pos;              // next position
  int out;              // its output row in this step's batch, -1 when not in it
  llama_token pending;  // last sampled, fed at the next step
  struct llama_sampler* sampler;  // TEMP > 0: its own, seeded by its prompt
  llama_token* gen;     // generated tokens
  int n_gen;
};

int main(int argc, char** argv) {
  if (argc < 6 || argc > 9)
    return fail("usage: llamacpp-parallel MODEL.gguf PROMPTS PARALLEL MAX_TOKENS OUT.jsonl [THREADS [KV_MIB [TEMP]]]",
                NULL);
  int parallel = 0, max_tokens = 0, threads = 2, kv_mib = 0;
  double temp = 0;
  if (!parse_count(argv[3], &parallel)) return fail("PARALLEL must be a whole number >= 1", argv[3]);
  if (!parse_count(argv[4], &max_tokens)) return fail("MAX_TOKENS must be a whole number >= 1", argv[4]);
  if (argc >= 7 && !parse_count(argv[6], &threads)) return fail("THREADS must be a whole number >= 1", argv[6]);
  if (argc >= 8 && strcmp(argv[7], "0") != 0 && !parse_count(argv[7], &kv_mib))
    return fail("KV_MIB must be a whole number (0: the worst case)", argv[7]);
  if (argc == 9) {
    char* end = NULL;
    temp = strtod(argv[8], &end);
    if (end == argv[8] || *end || !(temp >= 0 && temp <= 100)) return fail("TEMP must be a number from 0 to 100", argv[8]);
  }

  size_t size = 0;
  char* text = read_all(argv[2], &size);
  if (!text) return fail("cannot read the prompts file", argv[2]);
  int n_prompts = 0;
  for (size_t i = 0; i < size; ++i) n_prompts += text[i] == 0;
  if (size > 0 && text[size - 1] != 0) return fail("the prompts file does not end with a NUL byte", argv[2]);
  if (n_prompts == 0) return fail("no prompts in the file", argv[2]);
  char** prompts = malloc(sizeof(char*) * (size_t)n_prompts);
  for (size_t i = 0, k = 0; k < (size_t)n_prompts; i += strlen(text + i) + 1) {
    if (text[i] == 0) return fail("an empty prompt in the file", argv[2]);
    prompts[k++] = text + i;
  }

  part = malloc(strlen(argv[5]) + 6);
  sprintf(part, "%s.part", argv[5]);
  FILE* out = fopen(part, "wb");
  if (!out) return fail("cannot write", part);

  llama_log_set(quiet, NULL);
  llama_backend_init();
  const int64_t t_load = llama_time_us();
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  struct llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return fail("cannot load the model", argv[1]);
  const struct llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);

  // Tokenize every prompt first: the longest one sizes the context and the batch.
  llama_token** ptoks = malloc(sizeof(llama_token*) * (size_t)n_prompts);
  int* plen = malloc(sizeof(int) * (size_t)n_prompts);
  for (int k = 0; k < n_prompts; ++k) {
    const int len = (int)strlen(prompts[k]);
    const int n = -llama_tokenize(vocab, prompts[k], len, NULL, 0, true, true);
    if (n <= 0) return fail("cannot tokenize a prompt", NULL);
    ptoks[k] = malloc(sizeof(llama_token) * (size_t)n);
    plen[k] = llama_tokenize(vocab, prompts[k], len, ptoks[k], n, true, true);
    if (plen[k] != n) return fail("cannot tokenize a prompt", NULL);
  }
  if (parallel > n_prompts) parallel = n_prompts;
  char piece_msg[160];
  int* sorted = malloc(sizeof(int) * (size_t)n_prompts);
  memcpy(sorted, plen, sizeof(int) * (size_t)n_prompts);
  qsort(sorted, (size_t)n_prompts, sizeof(int), longer_first);
  long long cells = 0, step = parallel;
  for (int k = 0; k < parallel; ++k) {
    cells += sorted[k] + max_tokens - 1;
    step += sorted[k];
  }
  const double cell_bytes = 2.0 * 2.0 * llama_model_n_layer(model) * llama_model_n_head_kv(model) *
                            (llama_model_n_embd(model) / llama_model_n_head(model));
  if (kv_mib > 0) {
    cells = (long long)(kv_mib * 1048576.0 / cell_bytes) / 256 * 256;
    if (cells < sorted[0] + max_tokens - 1) {
      snprintf(piece_msg, sizeof piece_msg, "%d MiB hold %lld cells, the longest prompt needs %d", kv_mib, cells,
               sorted[0] + max_tokens - 1);
      return fail("KV_MIB is too small", piece_msg);
    }
    if (step > cells) step = cells;
  }
  free(sorted);
  if (cells > 1 << 30) return fail("the context would be too large", NULL);

  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)cells;
  cp.n_batch = (uint32_t)step;
  cp.n_ubatch = cp.n_batch;
  cp.n_seq_max = (uint32_t)parallel;
  cp.n_outputs_max = (uint32_t)parallel;
  cp.kv_unified = true;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  struct llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return fail("cannot create a context", NULL);
  llama_memory_t mem = llama_get_memory(ctx);
  const double load_seconds = (double)(llama_time_us() - t_load) / 1e6;

  struct slot* slots = calloc((size_t)parallel, sizeof(struct slot));
  for (int s = 0; s < parallel; ++s) {
    slots[s].prompt = -1;
    slots[s].gen = malloc(sizeof(llama_token) * (size_t)max_tokens);
  }
  struct llama_batch batch = llama_batch_init((int32_t)cp.n_batch, 0, 1);
  const long long n_cells = (long long)llama_n_ctx(ctx);
  long long reserved = 0;  // cells the sequences in flight may need, at most
  int next = 0, done = 0, steps = 0, max_in_flight = 0;
  long long tokens = 0;
  char piece[256];
  const int64_t t0 = llama_time_us();
  while (done < n_prompts) {
    batch.n_tokens = 0;
    int in_flight = 0;
    for (int s = 0; s < parallel; ++s) {
      struct slot* sl = &slots[s];
      sl->out = -1;
      if (sl->prompt < 0 && next < n_prompts && reserved + plen[next] + max_tokens - 1 <= n_cells) {
        // admit: the whole prompt, output at its last token
        reserved += plen[next] + max_tokens - 1;
        if (temp > 0) {
          sl->sampler = llama_sampler_chain_init(llama_sampler_chain_default_params());
          llama_sampler_chain_add(sl->sampler, llama_sampler_init_temp((float)temp));
          llama_sampler_chain_add(sl->sampler, llama_sampler_init_dist((uint32_t)(1 + next)));
        }
        sl->prompt = next++;
        sl->pos = 0;
        sl->n_gen = 0;
        for (int i = 0; i < plen[sl->prompt]; ++i)
          add(&batch, ptoks[sl->prompt][i], sl->pos++, s, i + 1 == plen[sl->prompt]);
      } else if (sl->prompt >= 0) {  // decode: its last sampled token
        add(&batch, sl->pending, sl->pos++, s, 1);
      }
      if (sl->prompt >= 0) {
        sl->out = batch.n_tokens - 1;
        ++in_flight;
      }
    }
    if (in_flight > max_in_flight) max_in_flight = in_flight;
    if (in_flight == 0) return fail("no prompt fits the KV cache", NULL);  // not reached: checked above
    const int rc = llama_decode(ctx, batch);
    if (rc != 0) {
      snprintf(piece, sizeof piece, "returned %d at step %d", rc, steps);
      return fail("llama_decode failed", piece);
    }
    ++steps;
    for (int s = 0; s < parallel; ++s) {
      struct slot* sl = &slots[s];
      if (sl->out < 0) continue;
      int best = 0;
      if (sl->sampler) {
        best = llama_sampler_sample(sl->sampler, ctx, sl->out);
      } else {
        const float* logits = llama_get_logits_ith(ctx, sl->out);
        if (!logits) return fail("no logits for a sequence", NULL);
        for (int v = 1; v < n_vocab; ++v)
          if (logits[v] > logits[best]) best = v;
      }
      const int eog = llama_vocab_is_eog(vocab, best);
      if (!eog) {
        sl->gen[sl->n_gen++] = best;
        sl->pending = best;
      }
      if (!eog && sl->n_gen < max_tokens) continue;
      // Finished: its record, its KV rows freed, its slot free for the next prompt.
      tokens += sl->n_gen;
      fprintf(out, "{\"index\":%d,\"prompt_tokens\":%d,\"n_tokens\":%d,\"finish_reason\":\"%s\",\"tokens\":[", sl->prompt,
              plen[sl->prompt], sl->n_gen, eog ? "stop" : "length");
      for (int i = 0; i < sl->n_gen; ++i) fprintf(out, i ? ",%d" : "%d", sl->gen[i]);
      fputs("],\"text\":", out);
      size_t tlen = 0, tcap = 256;
      char* t = malloc(tcap);
      for (int i = 0; i < sl->n_gen; ++i) {
        const int k = llama_token_to_piece(vocab, sl->gen[i], piece, (int32_t)sizeof piece, 0, false);
        if (k < 0) return fail("a token's text is too long", NULL);
        while (tlen + (size_t)k > tcap) t = realloc(t, tcap *= 2);
        memcpy(t + tlen, piece, (size_t)k);
        tlen += (size_t)k;
      }
      json_string(out, t, tlen);
      free(t);
      fputs("}\n", out);
      llama_memory_seq_rm(mem, s, -1, -1);
      reserved -= plen[sl->prompt] + max_tokens - 1;
      if (sl->sampler) llama_sampler_free(sl->sampler);
      sl->sampler = NULL;
      sl->prompt = -1;
      ++done;
    }
  }
  const double wall = (double)(llama_time_us() - t0) / 1e6;
  if (fclose(out) != 0 || rename(part, argv[5]) != 0) return fail("cannot write", argv[5]);
  printf("{\"prompts\":%d,\"parallel\":%d,\"max_tokens\":%d,\"tokens\":%lld,\"wall_seconds\":%.3f,"
         "\"tokens_per_second\":%.4f,\"steps\":%d,\"max_in_flight\":%d,\"n_ctx\":%u,\"kv_mib\":%.1f,\"load_seconds\":%.3f}\n",
         n_prompts, parallel, max_tokens, tokens, wall, (double)tokens / wall, steps, max_in_flight, llama_n_ctx(ctx),
         (double)n_cells * cell_bytes / 1048576.0, load_seconds);

  llama_batch_free(batch);
  for (int s = 0; s < parallel; ++s) free(slots[s].gen);
  free(slots);
  for (int k = 0; k < n_prompts; ++k) free(ptoks[k]);
  free(ptoks);
  free(plen);
  free(prompts);
  free(text);
  free(part);
  part = NULL;
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
