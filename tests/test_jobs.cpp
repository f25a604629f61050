// Batch jobs without a model: the TOML job parser's errors (file, line, key),
// the prompt file reader, resuming an output with a torn last line, the
// writer, percentiles and progress text.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <tuple>

#include "src/jobs/job.h"
#include "src/jobs/progress.h"
#include "src/jobs/prompts.h"
#include "src/jobs/results.h"
#include "src/jobs/serve_config.h"
#include "src/jobs/shard.h"
#include "src/jobs/shard_check.h"
#include "src/jobs/suite_config.h"
#include "src/util/error.h"
#include "src/util/io.h"
#include "tests/fuzz/jobs_harness.h"
#include "tests/util/errors.h"

namespace redwood::jobs {
namespace {

namespace fs = std::filesystem;

using testutil::error_of;

const char* kMinimal = "[model]\ntarget = \"m.gguf\"\n";

TEST(JobConfig, MinimalJobGetsDefaults) {
  const JobConfig j = parse_job_text(kMinimal, "job.toml");
  EXPECT_EQ(j.target, "m.gguf");
  EXPECT_EQ(j.max_tokens, 128);
  EXPECT_EQ(j.ctx, 2048);
  EXPECT_FALSE(j.skip_bad_lines);
  EXPECT_EQ(j.lines.at("model.target"), 2);
}

TEST(JobConfig, FullJobParses) {
  const JobConfig j = parse_job_text(R"(name = "x"
[model]
target = "t.gguf"
draft = "d.gguf"
[memory]
device = "1.5GiB+draft"
host = "4GiB"
ring = 3
ctx = 4096
threads = 2
kv_type = "bf16"
[speculation]
tree = "kary:4x8"
verify = "spectr"
budget = 128
depth = 12
threshold = 0.001
delta = 0.5
width = 8
[sampling]
temperature = 0.6
top_p = 0.9
top_k = 40
seed = 7
max_tokens = 64
stop = ["\n\n", "###"]
[input]
prompts = "p.jsonl"
chat = true
on_bad_line = "skip"
[output]
path = "o.jsonl"
summary = "s.json"
fsync_every = 4
progress_every = 2.5
)",
                                     "job.toml");
  EXPECT_EQ(j.draft, "d.gguf");
  EXPECT_EQ(j.device_mem, "1.5GiB+draft");
  EXPECT_EQ(j.ring, 3);
  EXPECT_EQ(j.kv_type, "bf16");
  EXPECT_EQ(j.tree, "kary:4x8");
  EXPECT_EQ(j.verify, "spectr");
  EXPECT_EQ(*j.width, 8);
  EXPECT_DOUBLE_EQ(*j.threshold, 0.001);
  EXPECT_FLOAT_EQ(j.sampling.temperature, 0.6f);
  EXPECT_EQ(j.sampling.top_k, 40);
  EXPECT_EQ(j.sampling.seed, 7u);
  ASSERT_EQ(j.stop.size(), 2u);
  EXPECT_EQ(j.stop[0], "\n\n");
  EXPECT_TRUE(j.chat);
  EXPECT_TRUE(j.skip_bad_lines);
  EXPECT_EQ(j.fsync_every, 4);
  EXPECT_DOUBLE_EQ(j.progress_every, 2.5);
}

// A table of bad configs, each with the message it must produce.
TEST(JobConfig, BadConfigsNameFileLineAndKey) {
  const std::string m = kMinimal;
  const struct {
    std::string text, expected;
  } cases[] = {
      {"[model\ntarget = 1", "job.toml:1: "},                         // TOML syntax
      {"[model]\ntarget = \"a\"\ntarget = \"b\"\n", "job.toml:3: "},  // duplicate key
      {"", "job.toml: model.target: missing"},
      {"[model]\ntarget = 5\n", "job.toml:2: model.target: expected a string, got an integer"},
      {"[model]\ntarget = \"m\"\ndraft = \"m\"\n", "job.toml:3: model.draft: the draft must be a different"},
      {"[modle]\ntarget = \"m\"\n", "job.toml:1: unknown key 'modle' (known in the top level: name, model"},
      {m + "[sampling]\ntemprature = 0.5\n", "job.toml:4: unknown key 'sampling.temprature' (known in [sampling]: "},
      {m + "[sampling]\ntemperature = \"hot\"\n", "job.toml:4: sampling.temperature: expected a number, got a string"},
      {m + "[sampling]\ntemperature = -1\n", "job.toml:4: sampling.temperature: must be in [0, 100], got -1"},
      {m + "[sampling]\ntop_p = 0\n", "job.toml:4: sampling.top_p: must be in (0, 1], got 0"},
      {m + "[sampling]\ntop_k = 1.5\n", "job.toml:4: sampling.top_k: expected an integer, got a number"},
      {m + "[sampling]\nmax_tokens = 0\n", "job.toml:4: sampling.max_tokens: must be in [1, 1048576], got 0"},
      {m + "[sampling]\nstop = \"x\"\n", "job.toml:4: sampling.stop: expected an array of strings, got a string"},
      {m + "[sampling]\nstop = [\"a\", 3]\n",
       "job.toml:4: sampling.stop: expected an array of strings, got an integer"},
      {m + "[sampling]\nstop = [\"\"]\n", "job.toml:4: sampling.stop: stop strings must not be empty"},
      {m + "[sampling]\nmax_tokens = 5000\n",
       "job.toml:4: sampling.max_tokens: 5000 tokens do not fit in memory.ctx = 2048"},
      {m + "[sampling]\nseed = -3\n", "job.toml:4: sampling.seed: must be in [0, "},
      {m + "[memory]\ndevice = \"lots\"\n", "job.toml:4: memory.device: "},
      {m + "[memory]\ndevice = \"1GiB+drafts\"\n", "job.toml:4: memory.device: "},
      {m + "[memory]\nring = 1\n", "job.toml:4: memory.ring: must be in [2, 64], got 1"},
      {m + "[memory]\nkv_type = \"f8\"\n", "job.toml:4: memory.kv_type: "},
      {m + "[memory]\nkv_type = 16\n", "job.toml:4: memory.kv_type: expected a string"},
      {"memory = 3\n" + m, "job.toml:1: memory: expected a table, got an integer"},
      {m + "[speculation]\ntree = \"sequoia\"\n", "job.toml:3: speculation: [speculation] needs model.draft"},
      {"[model]\ntarget = \"t\"\ndraft = \"d\"\n[speculation]\nverify = \"magic\"\n",
       "job.toml:5: speculation.verify: expected greedy | specinfer | sequoia | target-sample | spectr | "
       "multidraft-is, got 'magic'"},
      {"[model]\ntarget = \"t\"\ndraft = \"d\"\n[speculation]\nbudget = 0\n",
       "job.toml:5: speculation.budget: must be in [1, 8192], got 0"},
      {"[model]\ntarget = \"t\"\ndraft = \"d\"\n[speculation]\nthreshold = 0\n",
       "job.toml:5: speculation.threshold: must be in (0, 1], got 0"},
      {"[model]\ntarget = \"t\"\ndraft = \"d\"\n[speculation]\ntree = \"\"\n",
       "job.toml:5: speculation.tree: must not be empty"},
      {m + "[input]\non_bad_line = \"ignore\"\n", "job.toml:4: input.on_bad_line: expected skip | fail, got 'ignore'"},
      {m + "[input]\nchat = \"yes\"\n", "job.toml:4: input.chat: expected true or false, got a string"},
      {m + "[output]\nfsync_every = 0\n", "job.toml:4: output.fsync_every: must be in [1, 1048576], got 0"},
      {m + "[output]\nprogress_every = 0\n", "job.toml:4: output.progress_every: must be in (0, 86400], got 0"},
      {m + "[output]\npath = [\"a\"]\n", "job.toml:4: output.path: expected a string, got an array"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of([&] { (void)parse_job_text(c.text, "job.toml"); });
    EXPECT_EQ(e.rfind(c.expected, 0), 0u) << "config:\n"
                                          << c.text << "\nexpected prefix: " << c.expected << "\ngot: " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << "one line: " << e;
  }
}

class JobFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("redwood-jobs-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }
  static std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  fs::path dir_;
};

TEST_F(JobFiles, CheckJobFindsMissingFilesAndDefaultsTheSummary) {
  const std::string model = write("m.gguf", "x");
  const std::string prompts = write("p.jsonl", "{\"id\": 1, \"prompt\": \"hi\"}\n");
  JobConfig j = parse_job_text("[model]\ntarget = \"" + model + "\"\ndraft = \"" + path("nope.gguf") +
                                   "\"\n[input]\nprompts = \"" + prompts + "\"\n[output]\npath = \"" +
                                   path("sub/out.jsonl") + "\"\n",
                               "job.toml");
  EXPECT_EQ(error_of([&] { check_job(j); }).rfind("job.toml:3: model.draft: no such file '" + path("nope.gguf"), 0),
            0u);
  j.draft.clear();
  check_job(j);
  EXPECT_EQ(j.summary, path("sub/out.jsonl") + ".summary.json");
  EXPECT_FALSE(fs::exists(path("sub")));  // validation leaves nothing behind; the run makes it
  create_output_dirs(j);
  EXPECT_TRUE(fs::is_directory(path("sub")));
  JobConfig u = j;
  u.output = model + "/x/out.jsonl";  // under a file
  u.summary.clear();
  EXPECT_EQ(error_of([&] { check_job(u); }), "job.toml:7: output.path: cannot create directory '" + model + "/x' ('" +
                                                 model + "' is not a writable directory)");
  // --output pointing at the prompt file is refused; overrides replace the job's paths.
  JobOverrides o;
  o.output = prompts;
  apply_overrides(j, o);
  j.summary.clear();
  EXPECT_NE(error_of([&] { check_job(j); }).find("is the prompt file itself"), std::string::npos);
  o.output = path("o2.jsonl");
  o.prompts = path("missing.jsonl");
  apply_overrides(j, o);
  // An overridden key's errors name the flag, not the job file's key.
  EXPECT_EQ(error_of([&] { check_job(j); }),
            "--prompts: no such file '" + path("missing.jsonl") + "' (the prompt file)");
  JobConfig k = parse_job_text(kMinimal, "job.toml");
  k.target = model;
  EXPECT_EQ(error_of([&] { check_job(k); }).rfind("job.toml: input.prompts: missing", 0), 0u);
}

// Issue 32: output.summary (and output.path) must be neither the results file
// (however spelled: "out/./sp.jsonl", "sub/../out/sp.jsonl", a symlink) nor an
// input of the job (prompts, target, draft, the job file itself) nor an
// existing non-regular file; validation refuses before anything runs.
TEST_F(JobFiles, CheckJobRefusesOutputsThatAreInputsOrTheResults) {
  const std::string model = write("m.gguf", "x");
  const std::string prompts = write("p.jsonl", "{\"id\": 1, \"prompt\": \"hi\"}\n");
  fs::create_directories(path("out"));
  const std::string text = "[model]\ntarget = \"" + model + "\"\n[input]\nprompts = \"" + prompts +
                           "\"\n[output]\npath = \"" + path("out/sp.jsonl") + "\"\n";
  const std::string job_file = write("job.toml", text);
  auto job_with_summary = [&](const std::string& summary) {
    JobConfig j = parse_job_text(text + "summary = \"" + summary + "\"\n", job_file);
    return j;
  };
  auto refused = [&](const std::string& summary, const std::string& expect) {
    JobConfig j = job_with_summary(summary);
    const std::string e = error_of([&] { check_job(j); });
    EXPECT_EQ(e.rfind(job_file + ":7: output.summary: ", 0), 0u) << summary << ": " << e;
    EXPECT_NE(e.find(expect), std::string::npos) << summary << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  };
  refused(path("out/./sp.jsonl"), "is the results file");  // the results file does not exist yet
  refused(path("out/../out/sp.jsonl"), "is the results file");
  write("out/sp.jsonl", "");
  fs::create_symlink(path("out/sp.jsonl"), path("link.jsonl"));
  refused(path("link.jsonl"), "is the results file");
  refused(path("out/../p.jsonl"), "refusing to overwrite an input");
  refused(model, "refusing to overwrite an input");
  refused(path("./job.toml"), "refusing to overwrite an input");
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  refused(path("fifo"), "not a regular file");
  // output.path itself: the model is an input; a FIFO is not a results file.
  JobConfig j = job_with_summary(path("s.json"));
  j.output = path("./m.gguf");
  EXPECT_NE(error_of([&] { check_job(j); }).find("output.path: '" + path("./m.gguf") + "' is the input"),
            std::string::npos);
  j.output = path("fifo");
  EXPECT_NE(error_of([&] { check_job(j); }).find("not a regular file"), std::string::npos);
  // A summary beside the results file is fine.
  JobConfig ok = job_with_summary(path("out/sp.summary.json"));
  check_job(ok);
  EXPECT_EQ(slurp(model), "x");
}

// A model may be a Hugging Face directory (config.json + *.safetensors), as
// Llama-2-70b-hf ships; a directory without config.json is named as such.
TEST_F(JobFiles, CheckJobTakesAHuggingFaceDirectoryAsAModel) {
  const std::string prompts = write("p.jsonl", "{\"id\": 1, \"prompt\": \"hi\"}\n");
  const std::string hf = path("hf");
  fs::create_directories(hf);
  JobConfig j = parse_job_text("[model]\ntarget = \"" + hf + "\"\n[input]\nprompts = \"" + prompts +
                                   "\"\n[output]\npath = \"" + path("out.jsonl") + "\"\n",
                               "job.toml");
  EXPECT_EQ(error_of([&] { check_job(j); }),
            "job.toml:2: model.target: '" + hf +
                "' is a directory without config.json (a model is a GGUF file or a Hugging Face safetensors "
                "directory)");
  write("hf/config.json", "{}");
  check_job(j);
  j.draft = hf + "/";
  check_job(j);
}

TEST(Prompts, LinesParseOrSayWhatIsWrong) {
  const PromptItem a = parse_prompt_line(R"({"id": "a", "prompt": "hello"})");
  EXPECT_EQ(a.key, "\"a\"");
  EXPECT_EQ(a.prompt, "hello");
  const PromptItem b = parse_prompt_line(R"({"id": 7, "messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_EQ(b.key, "7");
  ASSERT_EQ(b.messages.size(), 1u);
  EXPECT_EQ(b.messages[0].content, "hi");
  const struct {
    const char* line;
    const char* expected;
  } bad[] = {
      {"{\"id\": 1, \"prompt\": \"x\"", "not valid JSON"},
      {"[1, 2]", "expected a JSON object"},
      {"{\"prompt\": \"x\"}", "missing \"id\""},
      {"{\"id\": 1.5, \"prompt\": \"x\"}", "\"id\" must be a string or an integer"},
      {"{\"id\": \"\", \"prompt\": \"x\"}", "\"id\" must not be empty"},
      {"{\"id\": 1}", "give exactly one of \"prompt\" and \"messages\""},
      {"{\"id\": 1, \"prompt\": \"x\", \"messages\": []}", "give exactly one of"},
      {"{\"id\": 1, \"prompt\": 3}", "\"prompt\" must be a string"},
      {"{\"id\": 1, \"prompt\": \"\"}", "\"prompt\" is empty"},
      {"{\"id\": 1, \"messages\": []}", "\"messages\" must be a non-empty array"},
      {"{\"id\": 1, \"messages\": [3]}", "each message must be an object"},
      {"{\"id\": 1, \"messages\": [{\"content\": \"x\"}]}", "a message needs a string \"role\""},
      {"{\"id\": 1, \"messages\": [{\"role\": \"user\"}]}", "a message needs a string \"content\""},
      {"{\"id\": 1, \"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}", "message role 'robot'"},
      {"{\"id\": 1, \"prompt\": \"\xff\"}", "not valid JSON"},
      // Issue 32: a key given twice, or one no prompt line has, was silently ignored.
      {"{\"id\": 1, \"prompt\": \"x\", \"prompt\": \"y\"}", "duplicate key \"prompt\""},
      {"{\"id\": 1, \"id\": 2, \"prompt\": \"x\"}", "duplicate key \"id\""},
      {"{\"id\": 1, \"messages\": [{\"role\": \"user\", \"role\": \"system\", \"content\": \"x\"}]}",
       "duplicate key \"role\""},
      {"{\"id\": 1, \"prompt\": \"x\", \"temperature\": 5}", "unknown key \"temperature\""},
      {"{\"id\": 1, \"prompt\": \"x\", \"extra\": [1]}", "unknown key \"extra\""},
      {"{\"id\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"x\", \"name\": \"n\"}]}",
       "unknown key \"name\" in a message"},
  };
  for (const auto& c : bad)
    EXPECT_EQ(error_of([&] { (void)parse_prompt_line(c.line); }).rfind(c.expected, 0), 0u) << c.line;
  // Equal keys in different objects are fine.
  EXPECT_EQ(parse_prompt_line(R"({"id": 1, "messages": [{"role": "user", "content": "a"}, )"
                              R"({"role": "assistant", "content": "b"}]})")
                .messages.size(),
            2u);
}

TEST_F(JobFiles, PromptFileFailsOrSkipsBadLinesWithLineNumbers) {
  const std::string p = write("p.jsonl",
                              "{\"id\": 1, \"prompt\": \"a\"}\n"
                              "\n"
                              "not json\n"
                              "{\"id\": 1, \"prompt\": \"b\"}\r\n"
                              "{\"id\": \"1\", \"prompt\": \"c\"}\n");
  EXPECT_EQ(error_of([&] { (void)read_prompts(p, false); }),
            p + ":3: not valid JSON (set input.on_bad_line = \"skip\" to skip bad lines)");
  const PromptFile f = read_prompts(p, true);
  ASSERT_EQ(f.items.size(), 2u);  // id 1 and id "1" are different ids
  EXPECT_EQ(f.items[1].line, 5);
  ASSERT_EQ(f.bad.size(), 2u);
  EXPECT_EQ(f.bad[0], p + ":3: not valid JSON");
  EXPECT_EQ(f.bad[1], p + ":4: duplicate id 1 (first on line 1)");
}

TEST_F(JobFiles, ResumeDropsATornLastLineAndNothingElse) {
  const std::string good =
      "{\"id\":\"a\",\"text\":\"x\",\"finish_reason\":\"stop\"}\n"
      "{\"id\":2,\"text\":\"y\",\"finish_reason\":\"length\"}\n";
  // Missing file: nothing done.
  EXPECT_TRUE(prepare_output(path("none.jsonl")).done.empty());
  // A kill in the middle of a line: no newline at the end.
  const std::string o = write("o.jsonl", good + "{\"id\":\"c\",\"te");
  const ResumeState s = prepare_output(o);
  EXPECT_EQ(s.lines, 2);
  EXPECT_EQ(s.torn_bytes, 13);
  EXPECT_TRUE(s.done.count("\"a\"") && s.done.count("2"));
  EXPECT_FALSE(s.done.count("\"c\""));
  EXPECT_EQ(slurp(o), good);
  // A kill within the first bytes of a line.
  for (const std::string_view cut : {"{", "{\"i", "{\"id\""}) {
    write("o.jsonl", good + std::string(cut));
    EXPECT_EQ(prepare_output(o).torn_bytes, static_cast<int64_t>(cut.size())) << cut;
    EXPECT_EQ(slurp(o), good);
  }
  // Zeros where a crash lost bytes that were not fsync'ed yet, with or
  // without the rest of the line after them: dropped too.
  const std::string zeros[] = {std::string(7, '\0'),
                               std::string("{\"id\":\0\0\0\0\"x\",\"finish_reason\":\"stop\"}\n", 38)};
  for (const std::string& z : zeros) {
    write("o.jsonl", good + z);
    EXPECT_EQ(prepare_output(o).torn_bytes, static_cast<int64_t>(z.size()));
    EXPECT_EQ(slurp(o), good);
  }
  // Complete file: untouched.
  EXPECT_EQ(prepare_output(o).torn_bytes, 0);
  // Anything else that is not a result line is refused and left as it is,
  // wherever it is: a complete last line, a foreign file, damage before the end.
  for (const std::string& bad : {good + "{\"id\":\"c\"}\n", std::string("important notes\n"),
                                 std::string("important notes"), "garbage\n" + good, good + "notes"}) {
    write("o.jsonl", bad);
    const std::string e = error_of([&] { (void)prepare_output(o); });
    EXPECT_NE(e.find("not a result line of redwood batch"), std::string::npos) << e;
    EXPECT_EQ(e.rfind(o + ":", 0), 0u) << e;
    EXPECT_EQ(slurp(o), bad);
  }
}

TEST_F(JobFiles, ConfigFilesThatAreNotFilesGiveOneLine) {
  const std::string dir = dir_.string();
  EXPECT_EQ(error_of([&] { (void)parse_job_file(dir); }), dir + ": is a directory, not the job file");
  EXPECT_EQ(error_of([&] { (void)parse_suite_file(dir); }), dir + ": is a directory, not the suite file");
  EXPECT_EQ(error_of([&] { (void)parse_job_file(path("none.toml")); }),
            path("none.toml") + ": cannot open the job file");
  const std::string big = write("big.txt", std::string(100, 'x'));
  EXPECT_EQ(error_of([&] { (void)redwood::read_text_file(big, "the file", 99); }),
            big + ": the file is larger than 99 bytes");
  EXPECT_EQ(redwood::read_text_file(big, "the file", 100), std::string(100, 'x'));
}

TEST_F(JobFiles, ResumeRefusesOtherSettings) {
  const nlohmann::json mine = {{"max_tokens", 6}, {"temperature", 0.9}};
  const std::string was =
      "{\"id\":\"a\",\"finish_reason\":\"stop\",\"settings\":{\"max_tokens\":3,\"temperature\":0.9}}\n";
  const std::string o = write("s.jsonl", was);
  const std::string e = error_of([&] { (void)prepare_output(o, mine); });
  EXPECT_EQ(e, o + ":1: written with other settings (max_tokens 3 -> 6); resuming would mix them in one file: "
                   "choose another output path, or remove the file to start over");
  EXPECT_EQ(slurp(o), was);
  // The same settings resume; a line without settings (an older redwood's) is counted, not refused.
  const std::string same =
      "{\"id\":\"b\",\"finish_reason\":\"stop\",\"settings\":{\"max_tokens\":6,\"temperature\":0.9}}\n";
  const std::string same_c =  // the same, another id (an id is on one line only)
      "{\"id\":\"c\",\"finish_reason\":\"stop\",\"settings\":{\"max_tokens\":6,\"temperature\":0.9}}\n";
  write("s.jsonl", same + "{\"id\":\"c\",\"finish_reason\":\"stop\"}\n");
  const ResumeState s = prepare_output(o, mine);
  EXPECT_EQ(s.lines, 2);
  EXPECT_EQ(s.unchecked, 1);
  // A key only one side has is named too.
  write("s.jsonl", same);
  EXPECT_NE(error_of([&] {
              (void)prepare_output(o, {{"max_tokens", 6}, {"temperature", 0.9}, {"seed", 1}});
            }).find("seed (none) -> 1"),
            std::string::npos);
  // A key this run records that an older line lacks (target_fingerprint) is not
  // held against it: the line is checked on the keys it has, and counted.
  write("s.jsonl", same + same_c);
  nlohmann::json more = mine;
  more["target_fingerprint"] = "0123456789abcdef";
  EXPECT_NE(error_of([&] { (void)prepare_output(o, more); }).find("target_fingerprint (none) -> "),
            std::string::npos);  // unless the caller names it as added later
  const ResumeState p = prepare_output(o, more, {"target_fingerprint"});
  EXPECT_EQ(p.lines, 2);
  EXPECT_EQ(p.partly_checked, 2);
  EXPECT_EQ(p.missing_keys, "target_fingerprint");
  // A line that records the same fingerprint is checked in full; a file of
  // old and new lines resumes, counting only the old ones.
  nlohmann::json same_fp = nlohmann::json::parse(same);
  same_fp["settings"]["target_fingerprint"] = "0123456789abcdef";
  same_fp["id"] = "c";
  write("s.jsonl", same + same_fp.dump() + "\n");
  const ResumeState mixed = prepare_output(o, more, {"target_fingerprint"});
  EXPECT_EQ(mixed.lines, 2);
  EXPECT_EQ(mixed.partly_checked, 1);
  write("s.jsonl", same_fp.dump() + "\n");
  EXPECT_EQ(prepare_output(o, more, {"target_fingerprint"}).partly_checked, 0);
  write("s.jsonl", same + same_c);
  more["max_tokens"] = 7;  // ... but the keys it has still count
  EXPECT_NE(error_of([&] { (void)prepare_output(o, more, {"target_fingerprint"}); }).find("max_tokens 6 -> 7)"),
            std::string::npos);
  // A line that records another fingerprint is refused.
  nlohmann::json line = nlohmann::json::parse(same);
  line["settings"]["target_fingerprint"] = "fedcba9876543210";
  write("s.jsonl", line.dump() + "\n");
  more["max_tokens"] = 6;
  EXPECT_NE(error_of([&] {
              (void)prepare_output(o, more, {"target_fingerprint"});
            }).find("target_fingerprint \"fedcba9876543210\" -> \"0123456789abcdef\""),
            std::string::npos);
}

// Issue 32: resume checks what is already there. A duplicated id is refused
// (it counted twice: "25 prompts done" for 24), and so is a line answered for
// a prompt since edited under the same id; a line without a prompt hash (an
// older redwood's) is counted, a line whose id is not among the prompts is
// kept but not done. Errors leave the file untouched.
TEST_F(JobFiles, ResumeChecksIdsAndPromptHashes) {
  PromptItem a, b, c;
  a.key = "\"a\"";
  a.prompt = "Say hi.";
  b.key = "\"b\"";
  b.messages = {{"user", "Say hi."}};
  c = a;
  c.prompt = "Say bye.";
  const PromptHashes now = {{a.key, prompt_hash(a, false)}, {b.key, prompt_hash(b, false)}};
  EXPECT_EQ(now.at(a.key).size(), 16u);
  EXPECT_NE(prompt_hash(a, false), prompt_hash(a, true));  // the chat flag counts
  EXPECT_NE(prompt_hash(a, false), prompt_hash(c, false));
  EXPECT_NE(prompt_hash(a, true), prompt_hash(b, true));  // text vs messages
  auto line = [](const std::string& id, const std::string& hash) {
    nlohmann::ordered_json j = {{"id", id}, {"text", "x"}, {"finish_reason", "stop"}};
    if (!hash.empty()) j["prompt_hash"] = hash;
    return j.dump() + "\n";
  };
  const std::string o = path("h.jsonl");
  const std::string good = line("a", now.at(a.key)) + line("b", now.at(b.key));
  write("h.jsonl", good);
  ResumeState s = prepare_output(o, {}, {}, &now);
  EXPECT_EQ(s.done.size(), 2u);
  EXPECT_EQ(s.no_prompt_hash + s.foreign, 0);

  const std::string dup = good + line("a", now.at(a.key));
  write("h.jsonl", dup);
  EXPECT_EQ(error_of([&] { (void)prepare_output(o, {}, {}, &now); }),
            o + ":3: id \"a\" is already on line 1 (a duplicated id: the file was changed by hand or by something "
                "else); fix or move the file");
  EXPECT_NE(error_of([&] { (void)prepare_output(o); }).find("duplicated id"), std::string::npos);  // always
  EXPECT_EQ(slurp(o), dup);

  const std::string edited = line("a", prompt_hash(c, false)) + line("b", now.at(b.key));
  write("h.jsonl", edited);
  EXPECT_EQ(error_of([&] { (void)prepare_output(o, {}, {}, &now); }),
            o + ":1: id \"a\" was answered for another prompt (the prompt with this id was edited since); resuming "
                "would keep the stale answer: choose another output path, or remove that line");
  EXPECT_EQ(slurp(o), edited);

  write("h.jsonl", line("a", "") + line("b", now.at(b.key)) + line("zz", now.at(a.key)));
  s = prepare_output(o, {}, {}, &now);
  EXPECT_EQ(s.no_prompt_hash, 1);
  EXPECT_EQ(s.foreign, 1);
  EXPECT_EQ(s.lines, 3);
  EXPECT_EQ(s.done, (std::unordered_set<std::string>{"\"a\"", "\"b\""}));
}

TEST_F(JobFiles, OneRunAtATimeHoldsTheOutput) {
  const std::string o = path("l.jsonl");
  {
    const OutputLock first(o);
    EXPECT_TRUE(std::filesystem::exists(o));
    EXPECT_EQ(error_of([&] { const OutputLock second(o); }),
              o + ": another redwood run is writing this file; wait for it, or choose another output path");
  }
  EXPECT_FALSE(std::filesystem::exists(o));  // created, nothing written: removed again
  write("l.jsonl", "");
  { const OutputLock again(o); }
  EXPECT_TRUE(std::filesystem::exists(o));  // not created by the lock: kept
  { const OutputLock after(o); }            // released
  const std::string dir = dir_.string();
  EXPECT_EQ(error_of([&] { const OutputLock d(dir); }), dir + ": cannot open for writing: Is a directory");
}

TEST_F(JobFiles, WriterAppendsWholeLines) {
  const std::string o = path("w.jsonl");
  {
    ResultWriter w(o, 2);
    w.append({{"id", 1}, {"text", "a\nb"}, {"finish_reason", "stop"}});
    w.append({{"id", "x"}, {"text", "\xff"}, {"finish_reason", "length"}});  // invalid UTF-8 is replaced
    w.close();
  }
  const std::string text = slurp(o);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
  const auto rows = read_results(o);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["text"], "a\nb");
  EXPECT_EQ(rows[1]["text"], "\xef\xbf\xbd");
  EXPECT_EQ(prepare_output(o).lines, 2);
}

// Issue 42: a results file replaced or removed under a running job (another
// program renamed its own output over it) stops the job before it writes
// another line, into either file; a file replaced between the lock and the
// writer's open is refused too.
TEST_F(JobFiles, WriterStopsWhenItsFileIsReplaced) {
  const std::string o = path("r.jsonl");
  const nlohmann::ordered_json line = {{"id", "a"}, {"text", "x"}, {"finish_reason", "stop"}};
  {
    const OutputLock lock(o);
    ResultWriter w(o, 1, &lock);
    w.append(line);
    write("other.json", "{\"summary\": 1}\n");
    fs::rename(path("other.json"), o);
    const std::string e = error_of([&] { w.append(line); });
    EXPECT_EQ(e.rfind(o + ": the results file was replaced or removed while the job ran", 0), 0u) << e;
    EXPECT_NE(e.find("stopped before writing id \"a\""), std::string::npos) << e;
    EXPECT_EQ(slurp(o), "{\"summary\": 1}\n");
  }
  fs::remove(o);
  {
    const OutputLock lock(o);
    ResultWriter w(o, 1, &lock);
    fs::remove(o);  // removed
    EXPECT_NE(error_of([&] { w.append(line); }).find("replaced or removed"), std::string::npos);
    EXPECT_FALSE(fs::exists(o));
  }
  {
    const OutputLock lock(o);
    write("other.json", "x\n");
    fs::rename(path("other.json"), o);
    EXPECT_NE(error_of([&] { ResultWriter w(o, 1, &lock); }).find("replaced or removed after this run locked it"),
              std::string::npos);
    EXPECT_EQ(slurp(o), "x\n");
  }
}

TEST(Summary, NearestRankPercentiles) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  const Percentiles p = percentiles(v);
  EXPECT_EQ(p.p50, 50);
  EXPECT_EQ(p.p90, 90);
  EXPECT_EQ(p.p99, 99);
  EXPECT_DOUBLE_EQ(p.mean, 50.5);
  const Percentiles one = percentiles({3.0});
  EXPECT_EQ(one.p50, 3.0);
  EXPECT_EQ(one.p99, 3.0);
  EXPECT_EQ(percentiles({}).p90, 0.0);
}

TEST(Progress, TextShowsCountsRateAcceptanceAndEta) {
  ProgressState s;
  s.total = 40;
  s.done = 12;
  s.done_this_run = 10;
  s.tokens = 352;
  s.seconds = 10;
  s.accepted_per_pass = 2.314;
  EXPECT_EQ(progress_text(s, false), "12/40 prompts | 35.2 tok/s | 2.31 tok/pass | ETA 28s");
  EXPECT_EQ(progress_text(s, true), "[#######-----------------] 12/40 prompts | 35.2 tok/s | 2.31 tok/pass | ETA 28s");
  s.done = 40;
  s.accepted_per_pass = 0;
  s.seconds = 3725;
  EXPECT_EQ(progress_text(s, false), "40/40 prompts | 0.1 tok/s | done in 1h02m");
  // Shared passes: prompts in flight, and their tokens counted before their lines end.
  s.done = 12;
  s.seconds = 10;
  s.in_flight = 8;
  s.tokens_in_flight = 48;
  s.accepted_per_pass = 7.5;
  EXPECT_EQ(progress_text(s, false), "12/40 prompts | 8 in flight | 40.0 tok/s | 7.50 tok/pass | ETA 28s");
}

TEST_F(JobFiles, SuiteMatrixExpandsToCellsAndJobs) {
  const std::string t = write("t.gguf", "x"), d = write("d.gguf", "x"), p = write("p.jsonl", "");
  const SuiteConfig s = parse_suite_text("[suite]\nmax_tokens = 8\nlimit = 3\n[[model]]\nname = \"m\"\ntarget = \"" +
                                             t + "\"\ndraft = \"" + d + "\"\n[[model]]\ntarget = \"" + t +
                                             "\"\nname = \"ar-only\"\n[matrix]\ndevice_mem = [\"\", \"1GiB\"]\n"
                                             "trees = [\"chain\", \"sequoia\"]\nbudgets = [4, 16]\n"
                                             "temperatures = [0, 0.6]\nprompts = [\"" +
                                             p + "\"]\n",
                                         "s.toml");
  const auto cells = suite_cells(s);
  // m: 2 memories x 2 temperatures x (1 baseline + 2 trees x 2 budgets); ar-only: baselines only.
  ASSERT_EQ(cells.size(), 2u * 2 * 5 + 2 * 2);
  std::set<std::string> ids;
  for (const auto& c : cells) ids.insert(c.id());
  EXPECT_EQ(ids.size(), cells.size());
  EXPECT_EQ(cells[0].id(), "m_resident_T0_p_ar");
  EXPECT_EQ(cells[1].id(), "m_resident_T0_p_chain_b4");
  const JobConfig j = cell_job(s, cells[1], "/out", "/out/prompts/p.jsonl");
  EXPECT_EQ(j.tree, "chain:3");
  EXPECT_EQ(j.draft, d);
  EXPECT_EQ(j.max_tokens, 8);
  EXPECT_EQ(j.output, "/out/cells/m_resident_T0_p_chain_b4.jsonl");
  EXPECT_TRUE(cell_job(s, cells[0], "/out", p).draft.empty());  // the baseline runs without the draft
  EXPECT_EQ(tree_for_budget("sequoia", 16), "sequoia");
  const std::string bad[][2] = {
      {"[matrix]\nprompts = [\"" + p + "\"]\n", "s.toml: model: missing"},
      {"[[model]]\ntarget = \"" + t + "\"\n[matrix]\ntrees = [\"chain\"]\nbudgets = [4]\nprompts = [\"" + p + "\"]\n",
       "s.toml:4: matrix.trees: no [[model]] has a draft"},
      {"[[model]]\ntarget = \"" + t + "\"\ndraft = \"" + d + "\"\n[matrix]\ntrees = [\"chain\"]\nbudgets = [1]\n",
       "s.toml:6: matrix.budgets: values must be in [2, 8192], got 1"},
      {"[[model]]\ntarget = \"/no/such\"\n[matrix]\nprompts = [\"" + p + "\"]\n",
       "s.toml:1: model.target: no such file '/no/such'"},
      {"[[model]]\ntarget = \"" + path("") + "\"\n[matrix]\nprompts = [\"" + p + "\"]\n",
       "s.toml:1: model.target: '" + path("") +
           "' is a directory without config.json (a model is a GGUF file or a Hugging Face safetensors directory)"},
      {"[[model]]\ntarget = \"" + t + "\"\n[matrix]\nprompts = [\"" + p + "\"]\nsizes = [1]\n",
       "s.toml:5: unknown key 'matrix.sizes'"},
  };
  for (const auto& b : bad)
    EXPECT_EQ(error_of([&] { (void)parse_suite_text(b[0], "s.toml"); }).rfind(b[1], 0), 0u)
        << b[0] << "\n-> " << error_of([&] { (void)parse_suite_text(b[0], "s.toml"); });
}

// matrix.sequences: every cell (baseline and trees) once per count of
// sequences sharing each pass; one-at-a-time cells keep their ids; dynamic
// trees cannot share passes and are refused with the key.
TEST_F(JobFiles, SuiteSequencesAreADimension) {
  const std::string t = write("t.gguf", "x"), d = write("d.gguf", "x"), p = write("p.jsonl", "");
  const std::string head = "[[model]]\nname = \"m\"\ntarget = \"" + t + "\"\ndraft = \"" + d + "\"\n[matrix]\n";
  const SuiteConfig s = parse_suite_text(
      head + "trees = [\"sequoia\"]\nbudgets = [8]\nprompts = [\"" + p + "\"]\nsequences = [1, 4]\n", "s.toml");
  const auto cells = suite_cells(s);
  ASSERT_EQ(cells.size(), 4u);  // (baseline + one tree) x 2 counts
  EXPECT_EQ(cells[0].id(), "m_resident_T0_p_ar");
  EXPECT_EQ(cells[1].id(), "m_resident_T0_p_sequoia_b8");
  EXPECT_EQ(cells[2].id(), "m_resident_T0_p_s4_ar");
  EXPECT_EQ(cells[3].id(), "m_resident_T0_p_s4_sequoia_b8");
  EXPECT_EQ(cell_job(s, cells[0], "/out", p).sequences, 1);
  EXPECT_EQ(cell_job(s, cells[3], "/out", p).sequences, 4);
  EXPECT_EQ(error_of([&] {
              (void)parse_suite_text(head + "trees = [\"dyspec\"]\nbudgets = [8]\nprompts = [\"" + p +
                                         "\"]\nsequences = [1, 4]\n",
                                     "s.toml");
            }),
            "s.toml:9: matrix.sequences: several sequences per pass take static trees or auto, not 'dyspec' (run it "
            "in a suite of sequences = [1])");
  EXPECT_EQ(error_of([&] {
              (void)parse_suite_text(head + "prompts = [\"" + p + "\"]\nsequences = [0]\n", "s.toml");
            }),
            "s.toml:7: matrix.sequences: values must be in [1, 256], got 0");
  EXPECT_EQ(error_of([&] {
              (void)parse_suite_text(head + "prompts = [\"" + p + "\"]\nsequences = [2, 2]\n", "s.toml");
            }),
            "s.toml:7: matrix.sequences: 2 is listed twice");
}

// Two cells with one id share one results file (results.md showed y's numbers
// for x): a matrix list that names a value twice, or two different cells that
// map to the same id, is refused at load naming both.
TEST_F(JobFiles, SuiteCellsAreDistinctOrRefused) {
  fs::create_directories(path("x"));
  fs::create_directories(path("y"));
  const std::string t = write("t.gguf", "x"), d = write("d.gguf", "x"), px = write("x/p.jsonl", ""),
                    py = write("y/p.jsonl", ""), q = write("q.jsonl", "");
  auto suite = [&](const std::string& models, const std::string& matrix) {
    return error_of([&] { (void)parse_suite_text(models + "[matrix]\n" + matrix, "s.toml"); });
  };
  const std::string m = "[[model]]\nname = \"m\"\ntarget = \"" + t + "\"\ndraft = \"" + d + "\"\n";  // lines 1-4
  const std::string ab = "[[model]]\nname = \"a b\"\ntarget = \"" + t + "\"\n[[model]]\nname = \"a_b\"\ntarget = \"" +
                         t + "\"\n";  // lines 1-6
  EXPECT_EQ(suite(m, "prompts = [\"" + px + "\", \"" + py + "\"]\n"),
            "s.toml:6: matrix.prompts: '" + px + "' and '" + py +
                "' give two cells the same id 'm_resident_T0_p_ar' (one results file for both): make them differ in "
                "letters or digits");
  EXPECT_EQ(suite(ab, "prompts = [\"" + q + "\"]\n"),
            "s.toml:5: model.name: 'a b' and 'a_b' give two cells the same id 'a_b_resident_T0_q_ar' (one results "
            "file for both): make them differ in letters or digits");
  const std::string trees = "trees = [\"chain\"]\nprompts = [\"" + q + "\"]\n";
  EXPECT_EQ(suite(m, trees + "budgets = [2, 2]\n"), "s.toml:8: matrix.budgets: 2 is listed twice");
  EXPECT_EQ(suite(m, trees + "budgets = [2]\ntemperatures = [0.5, 0.5]\n"),
            "s.toml:9: matrix.temperatures: 0.5 is listed twice");
  EXPECT_EQ(suite(m, trees + "budgets = [2]\ntemperatures = [0.5, 0.50000000001]\n"),
            "s.toml:9: matrix.temperatures: 0.5 and 0.50000000001 give two cells the same id "
            "'m_resident_T0.5_q_ar' (one results file for both): make them differ in letters or digits");
  EXPECT_EQ(suite(m, "trees = [\"chain\", \"chain\"]\nbudgets = [2]\nprompts = [\"" + q + "\"]\n"),
            "s.toml:6: matrix.trees: 'chain' is listed twice");
  EXPECT_EQ(suite(m, "device_mem = [\"1GiB\", \"1GiB\"]\nprompts = [\"" + q + "\"]\n"),
            "s.toml:6: matrix.device_mem: '1GiB' is listed twice");
  EXPECT_EQ(suite(m, "prompts = [\"" + q + "\", \"" + q + "\"]\n"), "s.toml:6: matrix.prompts: '" + q + "' is listed twice");
  // Distinct cells with distinct ids still parse (at T = 0 "chain/spectr" is the cell "chain", once).
  EXPECT_EQ(suite(m, "trees = [\"chain\", \"chain/spectr\"]\nbudgets = [2, 3]\ntemperatures = [0, 0.6]\nprompts = [\"" +
                         px + "\", \"" + q + "\"]\n"),
            "(no error)");
}

// A 100 kB file nested 50,000 levels deep (a dotted key, a table header, an
// array) overflowed toml++'s stack (SIGSEGV): every TOML reader bounds nesting
// before the library sees the text, with one line naming file and line.
TEST(JobParsers, DeeplyNestedTomlIsOneLineError) {
  std::string dotted = "a", header = "[a", array = "x = ";
  for (int i = 0; i < 50000; ++i) dotted += ".a", header += ".a";
  array += std::string(50000, '[') + std::string(50000, ']') + "\n";
  std::string inline_tables;
  for (int i = 0; i < 5000; ++i) inline_tables += "{ a = ";
  const std::pair<std::string, std::string> cases[] = {
      {"[model]\ntarget = \"m.gguf\"\n" + dotted + " = 1\n", ":3: nested more than 64 levels deep"},
      {"[model]\ntarget = \"m.gguf\"\n" + header + "]\n", ":3: nested more than 64 levels deep"},
      {"# deep\n" + array, ":2: nested more than 64 levels deep"},
      {"y = " + inline_tables + "\n", ":1: nested more than 64 levels deep"},
  };
  for (const auto& [text, expected] : cases)
    for (const std::string file : {"job.toml", "suite.toml"}) {
      const std::string e = error_of([&, &text = text] {
        if (file == "job.toml")
          (void)parse_job_text(text, file);
        else
          (void)parse_suite_text(text, file);
      });
      EXPECT_EQ(e.rfind(file + expected, 0), 0u) << e.substr(0, 300);
      EXPECT_EQ(e.find('\n'), std::string::npos);
    }
  // Nesting within the limit, and strings and comments that look deep, parse.
  std::string at_limit = "[k";
  for (int i = 1; i < 64; ++i) at_limit += ".k";
  const std::string deep(70, '[');
  const std::string ok = "# [" + at_limit + ".k.k.k]\n[model]\ntarget = \"m.gguf\" # " + deep + "\nname = \"a.\\\"" +
                         deep + "\"\n[output]\nfile = '''x.y.z\n" + deep + "\n'''\nx = \"\"\"\n" + deep + "\"\"\"\n" +
                         at_limit + "]\n";
  EXPECT_EQ(error_of([&] { (void)parse_job_text(ok, "job.toml"); }).find("nested"), std::string::npos);
  EXPECT_EQ(error_of([&] { (void)parse_job_text(at_limit + ".k]\n", "job.toml"); }).rfind("job.toml:1: nested", 0),
            0u);
  // And a size bound: the parser never sees more than 4 MiB.
  const std::string big(5u << 20, '#');
  EXPECT_EQ(error_of([&] { (void)parse_job_text(big, "job.toml"); }).rfind("job.toml: 5242880 bytes", 0), 0u);
}

// Mutation fuzzing of the three text parsers (job TOML, suite TOML, prompt
// lines): whatever the bytes, the result is a config or redwood::Error, never
// another exception or a crash (the ASan/UBSan build runs this too). The
// libFuzzer target tests/fuzz/fuzz_jobs.cpp explores further; its corpus is
// replayed below.
// Every job and bench suite shipped in configs/ parses (a key renamed in the
// parser, or a config edited by hand, fails here rather than in a user's run).
// The parsers also check that the files a config names exist (models,
// prompts, acceptance profiles, made by tools/ and bench/ scripts): they are
// created empty, one at a time as the parser names them, in a scratch
// directory the configs' relative paths resolve in.
TEST(JobConfig, ShippedConfigsParse) {
  namespace fs = std::filesystem;
  const fs::path scratch = fs::path(::testing::TempDir()) / "shipped-configs";
  fs::create_directories(scratch);
  const fs::path cwd = fs::current_path();
  fs::current_path(scratch);
  int n = 0;
  for (const char* dir : {"/configs/jobs", "/configs/bench"})
    for (const auto& e : fs::directory_iterator(std::string(REDWOOD_SOURCE_DIR) + dir)) {
      if (e.path().extension() != ".toml") continue;
      ++n;
      const bool job = std::string(dir) == "/configs/jobs";
      std::string error;
      for (int tries = 0; tries < 32; ++tries) {
        try {
          if (job)
            (void)parse_job_file(e.path().string());
          else
            (void)parse_suite_file(e.path().string());
          error.clear();
          break;
        } catch (const Error& err) {
          error = err.what();
          const std::string key = "no such file '";
          const size_t at = error.find(key);
          if (at == std::string::npos) break;
          const fs::path missing = error.substr(at + key.size(), error.find('\'', at + key.size()) - at - key.size());
          if (missing.is_absolute() || fs::exists(missing)) break;
          if (missing.has_parent_path()) fs::create_directories(missing.parent_path());
          std::ofstream(missing).flush();
        }
      }
      EXPECT_EQ(error, "") << e.path();
    }
  fs::current_path(cwd);
  EXPECT_GE(n, 4);
}

TEST(JobParsers, SurviveMutatedInput) {
  const std::string seeds[] = {
      "name = \"x\"\n[model]\ntarget = \"t\"\ndraft = \"d\"\n[memory]\ndevice = \"1GiB\"\nring = 3\n"
      "[speculation]\ntree = \"sequoia\"\nbudget = 64\nthreshold = 0.01\n[sampling]\ntemperature = 0.6\n"
      "stop = [\"\\n\\n\"]\n[input]\nprompts = \"p\"\non_bad_line = \"skip\"\n[output]\npath = \"o\"\n",
      "[suite]\nmax_tokens = 8\n[[model]]\nname = \"m\"\ntarget = \"/nonexistent\"\n[matrix]\n"
      "trees = [\"chain\", \"kary:4/spectr\"]\nbudgets = [4, 8]\ntemperatures = [0, 0.6]\nprompts = [\"p\"]\n",
      "{\"id\": 7, \"messages\": [{\"role\": \"user\", \"content\": \"hi \\u00e9\"}], \"prompt\": \"x\"}",
  };
  const std::string alphabet = "[]{}\"'=.,:#\\\n \t0123456789-+eEinfnatruefalsxyz_\x00\xff\xc3\xa9";
  std::mt19937_64 rng(12345);
  int errors = 0, parsed = 0;
  for (int which = 0; which < 3; ++which) {
    for (int iter = 0; iter < 4000; ++iter) {
      std::string t = seeds[which];
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !t.empty(); ++e) {
        const size_t at = rng() % t.size();
        const char c = alphabet[rng() % alphabet.size()];
        switch (rng() % 4) {
          case 0:
            t[at] = c;
            break;
          case 1:
            t.insert(t.begin() + static_cast<std::ptrdiff_t>(at), c);
            break;
          case 2:
            t.erase(at, 1 + rng() % 8);
            break;
          default:
            t.resize(at);
            break;
        }
      }
      try {
        if (which == 0) (void)parse_job_text(t, "job.toml");
        if (which == 1) (void)parse_suite_text(t, "s.toml");
        if (which == 2) (void)parse_prompt_line(t);
        ++parsed;
      } catch (const Error& e) {
        ++errors;
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "non-redwood exception " << e.what() << " for input:\n" << t;
      }
    }
  }
  EXPECT_GT(errors, 1000);  // the mutations do hit the error paths
  EXPECT_GT(parsed, 100);   // and some still parse
}

// The libFuzzer corpus (seeds and fixed crashers) through the same harness.
TEST(JobParsers, FuzzCorpusReplays) {
  const std::filesystem::path dir = std::filesystem::path(REDWOOD_SOURCE_DIR) / "tests/fuzz/corpus/jobs";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream f(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    try {
      EXPECT_TRUE(redwood::fuzz::run_jobs(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size())) << e.path();
    } catch (const std::exception& ex) {
      ADD_FAILURE() << e.path() << ": non-redwood exception " << ex.what();
    }
    ++n;
  }
  EXPECT_GE(n, 6);
}

// Issue 44 item 5: a job split into shards by id (src/jobs/shard.h).
TEST(Shards, ParseTakesKOfNAndRefusesTheRestInOneLine) {
  for (const auto& [text, k, n] : std::vector<std::tuple<std::string, int, int>>{
           {"1/1", 1, 1}, {"2/8", 2, 8}, {"8/8", 8, 8}, {"07/10", 7, 10}, {"1/1048576", 1, 1048576}}) {
    const Shard s = parse_shard(text);
    EXPECT_EQ(s.index, k) << text;
    EXPECT_EQ(s.count, n) << text;
  }
  for (const std::string bad : {"3/2", "0/0", "a/b", "0/3", "1/0", "1/", "/2", "2", "", "-1/2", "+1/2", " 1/2", "1/2 ",
                                "1/2/3", "1.0/2", "1/1048577", "99999999/99999999"}) {
    const std::string e = error_of([&] { (void)parse_shard(bad); });
    EXPECT_EQ(e, "expected a shard K/N with 1 <= K <= N <= 1048576 (e.g. 2/8), got '" + bad + "'") << bad;
  }
  EXPECT_EQ(Shard({2, 8}).str(), "2/8");
  EXPECT_FALSE(Shard().active());
}

TEST(Shards, EveryPromptIsInExactlyOneShardWhateverIsAppended) {
  std::vector<PromptItem> items;
  auto add = [&](const nlohmann::json& id) {
    PromptItem it;
    it.id = id;
    it.key = id.dump();
    it.prompt = "p";
    items.push_back(it);
  };
  for (int i = 0; i < 600; ++i) add(i % 2 ? nlohmann::json(i) : nlohmann::json("q-" + std::to_string(i)));
  for (const int n : {1, 2, 3, 7, 16}) {
    std::map<std::string, int> owner;
    for (int k = 1; k <= n; ++k) {
      std::vector<PromptItem> mine = items;
      keep_shard(mine, {k, n});
      // Even enough: no shard has fewer than half its share of 600 ids.
      EXPECT_GE(static_cast<int>(mine.size()), 600 / n / 2) << k << "/" << n;
      for (const PromptItem& it : mine) {
        EXPECT_TRUE(owner.emplace(it.key, k).second) << it.key << " in two shards of " << n;
        EXPECT_EQ(shard_of(it.key, n), k);
      }
    }
    EXPECT_EQ(owner.size(), items.size()) << n;  // none left out
    // Appending (and reordering, and removing) prompts moves none of the others.
    std::vector<PromptItem> more(items.rbegin(), items.rend() - 100);
    for (int i = 0; i < 300; ++i) {
      PromptItem it;
      it.key = "\"new-" + std::to_string(i) + "\"";
      more.push_back(it);
    }
    for (int k = 1; k <= n; ++k) {
      std::vector<PromptItem> mine = more;
      keep_shard(mine, {k, n});
      for (const PromptItem& it : mine)
        if (owner.count(it.key)) {
          EXPECT_EQ(owner.at(it.key), k) << it.key;
        }
    }
  }
  // The hash is part of the output format (a resumed shard finds its ids
  // where they were): these values must not change.
  EXPECT_EQ(shard_of("1", 8), 2);  // as Python computes FNV-1a + splitmix64 (README)
  EXPECT_EQ(shard_of("\"1\"", 8), 6);
  EXPECT_EQ(shard_of("\"a\"", 3), 3);
  std::vector<PromptItem> all = items;
  keep_shard(all, Shard());
  EXPECT_EQ(all.size(), items.size());
}

TEST(Shards, OutputNamesCarryTheShard) {
  EXPECT_EQ(shard_output_path("out.jsonl", {2, 8}), "out.shard-2-of-8.jsonl");
  EXPECT_EQ(shard_output_path("a.b/out", {1, 3}), "a.b/out.shard-1-of-3");
  EXPECT_EQ(shard_output_path("d/r.summary.json", {3, 3}), "d/r.summary.shard-3-of-3.json");
  EXPECT_EQ(shard_output_path("d/.hidden", {1, 2}), "d/.hidden.shard-1-of-2");
  EXPECT_EQ(shard_output_path("out.jsonl", Shard()), "out.jsonl");
  EXPECT_EQ(shard_output_path("", {1, 2}), "");
}

TEST_F(JobFiles, AShardIsAJobKeyOrAnOverrideAndNamesItsOutputs) {
  const std::string model = write("m.gguf", "x");
  const std::string prompts = write("p.jsonl", "{\"id\": 1, \"prompt\": \"hi\"}\n");
  const std::string text = "[model]\ntarget = \"" + model + "\"\n[batch]\nshard = \"2/3\"\n[input]\nprompts = \"" +
                           prompts + "\"\n[output]\npath = \"" + path("out.jsonl") + "\"\n";
  JobConfig j = parse_job_text(text, "job.toml");
  EXPECT_EQ(j.shard.str(), "2/3");
  JobConfig o = j;
  check_job(j);
  EXPECT_EQ(j.output, path("out.shard-2-of-3.jsonl"));
  EXPECT_EQ(j.summary, path("out.shard-2-of-3.jsonl.summary.json"));
  check_job(j);  // once only
  EXPECT_EQ(j.output, path("out.shard-2-of-3.jsonl"));
  JobOverrides over;
  over.shard = "3/4";  // the command line wins
  apply_overrides(o, over);
  o.summary = path("sum.json");  // as output.summary = "..." in the job
  check_job(o);
  EXPECT_EQ(o.output, path("out.shard-3-of-4.jsonl"));
  EXPECT_EQ(o.summary, path("sum.shard-3-of-4.json"));
  EXPECT_EQ(error_of([&] { (void)parse_job_text("[model]\ntarget = \"m\"\n[batch]\nshard = \"3/2\"\n", "job.toml"); }),
            "job.toml:4: batch.shard: expected a shard K/N with 1 <= K <= N <= 1048576 (e.g. 2/8), got '3/2'");
  EXPECT_EQ(error_of([&] {
              (void)parse_job_text("[model]\ntarget = \"m\"\n[batch]\nshard = 2\n", "job.toml");
            }).rfind("job.toml:4: batch.shard: expected a string", 0),
            0u);
  over.shard = "0/0";
  EXPECT_EQ(error_of([&] { apply_overrides(o, over); }),
            "--shard: expected a shard K/N with 1 <= K <= N <= 1048576 (e.g. 2/8), got '0/0'");
}

// check_shards over hand-written shard outputs: each way of missing, repeating
// or mixing answers is named by its first line.
TEST_F(JobFiles, CheckShardsFindsEveryPromptAnsweredOnce) {
  std::string ptext;
  for (int i = 1; i <= 12; ++i)
    ptext += "{\"id\": " + std::to_string(i) + ", \"prompt\": \"p" + std::to_string(i) + "\"}\n";
  const std::string prompts = write("p.jsonl", ptext);
  JobConfig job = parse_job_text("[model]\ntarget = \"m\"\n[input]\nprompts = \"" + prompts +
                                     "\"\n[output]\npath = \"" + path("out.jsonl") + "\"\n",
                                 "job.toml");
  const PromptFile pf = read_prompts(prompts, false);
  const nlohmann::json settings = {{"target", "m.gguf"}, {"target_fingerprint", "abc"}, {"max_tokens", 8}};
  auto line = [&](const PromptItem& it, int k, const nlohmann::json& s = nullptr) {
    nlohmann::ordered_json j = {
        {"id", it.id}, {"text", "t"}, {"finish_reason", "length"}, {"prompt_hash", prompt_hash(it, false)}};
    j["settings"] = s.is_null() ? settings : s;
    j["settings"]["shard"] = std::to_string(k) + "/3";
    return j.dump() + "\n";
  };
  std::map<int, std::string> files;  // shard -> its lines
  auto write_all = [&] {
    for (int k = 1; k <= 3; ++k) fs::remove(shard_output_path(path("out.jsonl"), {k, 3}));
    for (const auto& [k, text] : files) write("out.shard-" + std::to_string(k) + "-of-3.jsonl", text);
  };
  std::map<int, std::vector<const PromptItem*>> of;
  for (const PromptItem& it : pf.items) {
    files[shard_of(it.key, 3)] += line(it, shard_of(it.key, 3));
    of[shard_of(it.key, 3)].push_back(&it);
  }
  ASSERT_EQ(of.size(), 3u);  // every shard has prompts here
  write_all();
  ShardCheck r = check_shards(job, 3);
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.message, "12 prompts answered once by 3 shards");
  const std::string out2 = path("out.shard-2-of-3.jsonl");
  const PromptItem& first2 = *of[2].front();

  auto expect_fail = [&](const std::string& message) {
    write_all();
    const ShardCheck c = check_shards(job, 3);
    EXPECT_FALSE(c.ok);
    EXPECT_EQ(c.message, message);
    EXPECT_EQ(c.message.find('\n'), std::string::npos);
  };
  const std::map<int, std::string> good = files;
  // A deleted line.
  files[2] = files[2].substr(files[2].find('\n') + 1);
  expect_fail("id " + first2.key + " (" + prompts + ":" + std::to_string(first2.line) +
              ") is answered by no shard: shard 2/3 ('" + out2 +
              "') has no line for it (not run, interrupted, or the prompt was skipped)");
  // A shard's output copied over another's.
  files = good;
  files[2] = files[1];
  expect_fail(out2 + ":1: written by shard 1/3, in shard 2/3's output");
  // An id answered twice in one shard.
  files = good;
  files[2] += line(first2, 2);
  expect_fail(out2 + ":" + std::to_string(of[2].size() + 1) + ": id " + first2.key + " is answered twice (also at " +
              out2 + ":1)");
  // A shard run with another setting.
  files = good;
  nlohmann::json other = settings;
  other["max_tokens"] = 9;
  files[2] = line(first2, 2, other) + files[2].substr(files[2].find('\n') + 1);
  expect_fail(out2 + ":1: shard 2/3 ran with other settings than " + path("out.shard-1-of-3.jsonl") +
              ":1 (max_tokens 8 -> 9)");
  // A line in the wrong shard's file (its tag changed by hand).
  files = good;
  files[2] += line(*of[1].front(), 2);
  expect_fail(out2 + ":" + std::to_string(of[2].size() + 1) + ": id " + of[1].front()->key +
              " belongs to shard 1/3, not 2/3");
  // An interrupted shard.
  files = good;
  files[2] += "{\"id\": 9";
  expect_fail(out2 + ":" + std::to_string(of[2].size() + 1) +
              ": a torn last line (shard 2/3 was interrupted): run it again to resume");
  // A missing shard; an unsharded output; an id not among the prompts.
  files = good;
  files.erase(3);
  write_all();
  EXPECT_NE(check_shards(job, 3).message.find("shard 3/3 ('" + path("out.shard-3-of-3.jsonl") + "') has no line"),
            std::string::npos);
  files = good;
  PromptItem stray;
  stray.id = 99;
  stray.key = "99";
  files[2] += line(stray, 2);
  expect_fail(out2 + ":" + std::to_string(of[2].size() + 1) + ": id 99 is not a prompt of " + prompts);
  // The check reads only.
  files = good;
  write_all();
  EXPECT_TRUE(check_shards(job, 3).ok);
  EXPECT_EQ(slurp(out2), good.at(2));
  EXPECT_EQ(error_of([&] { (void)check_shards(job, 0); }), "--check-shards: expected 1 to 1048576 shards, got 0");
}

// A serve file (serve_config.h): the job's sections, read by the same code.
TEST(ServeFile, SharedSectionsMeanWhatTheyMeanInAJob) {
  const char* shared = "[model]\ntarget = \"t.gguf\"\ndraft = \"d.gguf\"\n[memory]\nctx = 512\nkv_type = \"f16\"\n"
                       "[speculation]\nbudget = 16\n[batch]\nsequences = 4\npass_tokens = 32\n"
                       "[sampling]\ntemperature = 0.5\nmax_tokens = 7\n";
  const ServeFile f = parse_serve_text(std::string(shared) + "[server]\nport = 0\nmax_queue = 3\ntimeout_s = 5\n",
                                       "serve.toml");
  const JobConfig j = parse_job_text(shared, "job.toml");
  EXPECT_EQ(f.run.target, j.target);
  EXPECT_EQ(f.run.draft, j.draft);
  EXPECT_EQ(f.run.ctx, j.ctx);
  EXPECT_EQ(f.run.kv_type, j.kv_type);
  EXPECT_EQ(f.run.budget, j.budget);
  EXPECT_EQ(f.run.sequences, j.sequences);
  EXPECT_EQ(f.run.pass_tokens, j.pass_tokens);
  EXPECT_EQ(f.run.sampling.temperature, j.sampling.temperature);
  EXPECT_EQ(f.run.max_tokens, j.max_tokens);
  EXPECT_EQ(f.port, 0);
  EXPECT_EQ(f.max_queue, 3);
  EXPECT_EQ(f.timeout_s, 5);
  EXPECT_TRUE(f.has("memory.ctx"));
  EXPECT_FALSE(f.has("memory.ring"));  // not in the file: the flag's default stays
  EXPECT_FALSE(f.has("server.host"));
}

// kv_type "q8_0" (issue 44) is taken by a job, a serve file and a suite
// (every reader checks the name against kKvTypeNames).
TEST_F(JobFiles, Q8KvTypeIsTakenByJobsServeFilesAndSuites) {
  const char* mem = "[model]\ntarget = \"t.gguf\"\n[memory]\nkv_type = \"q8_0\"\n";
  EXPECT_EQ(parse_job_text(mem, "job.toml").kv_type, "q8_0");
  EXPECT_EQ(parse_serve_text(mem, "serve.toml").run.kv_type, "q8_0");
  const std::string p = write("p.jsonl", ""), t = write("t.gguf", "x");
  const SuiteConfig s = parse_suite_text("[suite]\nkv_type = \"q8_0\"\n[[model]]\nname = \"m\"\ntarget = \"" + t +
                                             "\"\n[matrix]\nprompts = [\"" + p + "\"]\n",
                                         "s.toml");
  EXPECT_EQ(s.kv_type, "q8_0");
}

TEST(ServeFile, RefusesWhatIsNotAServersWithFileLineAndKey) {
  EXPECT_EQ(error_of([] { parse_serve_text("[server]\nport = 1\nhots = 1\n", "s.toml"); }),
            "s.toml:3: unknown key 'server.hots' (known in [server]: host, port, api_key_env, max_queue, timeout_s)");
  EXPECT_EQ(error_of([] { parse_serve_text("[output]\npath = \"o\"\n", "s.toml"); }),
            "s.toml:1: unknown key 'output' (known in the top level: model, memory, speculation, batch, sampling, "
            "server)");
  EXPECT_EQ(error_of([] { parse_serve_text("[sampling]\nstop = [\"x\"]\n", "s.toml"); }),
            "s.toml:2: unknown key 'sampling.stop' (known in [sampling]: temperature, top_p, top_k, seed, max_tokens)");
  EXPECT_EQ(error_of([] { parse_serve_text("[batch]\nsequences = \"auto\"\n", "s.toml"); }),
            "s.toml:2: batch.sequences: \"auto\" is for batch jobs; a server takes a number");
  EXPECT_EQ(error_of([] { parse_serve_text("[server]\nport = \"80\"\n", "s.toml"); }),
            "s.toml:2: server.port: expected an integer, got a string");
  EXPECT_EQ(error_of([] { parse_serve_text("[server]\nhost = \"\"\n", "s.toml"); }),
            "s.toml:2: server.host: must not be empty");
  EXPECT_EQ(error_of([] { parse_serve_text("server = 1\n", "s.toml"); }),
            "s.toml:1: server: expected a table, got an integer");
  // A job file keeps its own keys.
  EXPECT_EQ(error_of([] { parse_job_text("[model]\ntarget = \"t\"\n[server]\nport = 1\n", "j.toml"); }),
            "j.toml:3: unknown key 'server' (known in the top level: name, model, memory, speculation, batch, sampling, "
            "input, output)");
}

TEST(ServeFile, ApiKeyComesFromTheVariableItNames) {
  ::setenv("REDWOOD_TEST_SERVE_KEY", "k3y", 1);
  EXPECT_EQ(parse_serve_text("[server]\napi_key_env = \"REDWOOD_TEST_SERVE_KEY\"\n", "s.toml").api_key, "k3y");
  ::unsetenv("REDWOOD_TEST_SERVE_KEY");  // refused by the server (apply_serve_file), not the parser: chat reads it too
  EXPECT_EQ(parse_serve_text("[server]\napi_key_env = \"REDWOOD_TEST_SERVE_KEY\"\n", "s.toml").api_key, "");
  EXPECT_EQ(error_of([] { parse_serve_text("[server]\napi_key_env = \"\"\n", "s.toml"); }),
            "s.toml:2: server.api_key_env: must not be empty");
  EXPECT_EQ(parse_serve_text("", "s.toml").api_key, "");
}

}  // namespace
}  // namespace redwood::jobs
