// Temp output files and fatal signals (src/util/temp_files.h, used by every
// writer through output_path.h, `redwood pack` and the GGUF writer): a
// signal that ends the process removes the registered temp files, leaves
// other files alone, and the process still dies of that signal; an ignored
// signal (nohup) stays ignored. Each case runs in a forked child.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "src/util/output_path.h"
#include "src/util/temp_files.h"

namespace redwood {
namespace {

namespace fs = std::filesystem;

struct Dir {
  fs::path p = fs::temp_directory_path() / ("redwood_temp_files_" + std::to_string(::getpid()));
  Dir() { fs::create_directories(p); }
  ~Dir() { fs::remove_all(p); }
  std::string file(const char* name) const {
    const std::string f = (p / name).string();
    std::ofstream(f) << "partial output";
    return f;
  }
};

// Runs body in a child; returns its wait status.
template <class F>
int in_child(F body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(TempFiles, AFatalSignalRemovesRegisteredFilesAndStillKills) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    Dir d;
    const std::string tmp = d.file("out.gguf.tmp.1"), other = d.file("notes.txt"), done = d.file("done.tmp.2");
    const int status = in_child([&] {
      ::signal(sig, SIG_DFL);  // the test runner may have inherited it ignored (nohup, a background job)
      remove_temp_files_on_signal();
      { const TempFileGuard finished(done); }  // renamed into place before the signal: not removed
      const TempFileGuard guard(tmp);
      ::raise(sig);
      ::_exit(3);  // not reached
    });
    ASSERT_TRUE(WIFSIGNALED(status)) << "signal " << sig << ", status " << status;
    EXPECT_EQ(WTERMSIG(status), sig);
    EXPECT_FALSE(fs::exists(tmp)) << sig;
    EXPECT_TRUE(fs::exists(other)) << sig;
    EXPECT_TRUE(fs::exists(done)) << sig;
  }
}

// The control: without the handler the signal leaves the temp file behind
// (what a killed `redwood pack` did before).
TEST(TempFiles, WithoutTheHandlerTheFileStays) {
  Dir d;
  const std::string tmp = d.file("out.rwpk.tmp.1");
  const int status = in_child([&] {
    const TempFileGuard guard(tmp);
    ::signal(SIGTERM, SIG_DFL);
    ::raise(SIGTERM);
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(fs::exists(tmp));
}

TEST(TempFiles, AnIgnoredSignalStaysIgnored) {
  Dir d;
  const std::string tmp = d.file("out.tmp.1");
  const int status = in_child([&] {
    ::signal(SIGHUP, SIG_IGN);  // nohup
    remove_temp_files_on_signal();
    const TempFileGuard guard(tmp);
    ::raise(SIGHUP);
    ::_exit(7);  // survived
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
  EXPECT_TRUE(fs::exists(tmp));
}

TEST(TempFiles, GuardsRegisterWhileTheyLive) {
  const int before = registered_temp_files();
  {
    const TempFileGuard a("/nonexistent/a.tmp"), b("/nonexistent/b.tmp");
    EXPECT_EQ(registered_temp_files(), before + 2);
  }
  EXPECT_EQ(registered_temp_files(), before);
  // More guards than slots: the extra ones are simply not registered.
  std::vector<std::unique_ptr<TempFileGuard>> many;
  for (int i = 0; i < 100; ++i) many.push_back(std::make_unique<TempFileGuard>("/nonexistent/" + std::to_string(i)));
  EXPECT_EQ(registered_temp_files(), 64);
  many.clear();
  EXPECT_EQ(registered_temp_files(), before);
}

// write_output_file's temp file is registered only while it is written.
TEST(TempFiles, WriteOutputFileLeavesNothingRegistered) {
  Dir d;
  const int before = registered_temp_files();
  write_output_file((d.p / "x.json").string(), "{}\n");
  EXPECT_EQ(registered_temp_files(), before);
  EXPECT_TRUE(fs::exists(d.p / "x.json"));
}

// TempOutput, the one temp-file writer (output_path.h): an uncommitted one
// (an error, an exception) leaves neither the output nor the temp file; a
// committed one leaves only the output; a link planted at the temp name is
// removed, never written through; a fatal signal while it is open removes it.
TEST(TempOutput, CommitRenamesAnErrorRemoves) {
  Dir d;
  const std::string out = (d.p / "model.gguf").string();
  const int before = registered_temp_files();
  try {
    TempOutput t(out);
    EXPECT_EQ(registered_temp_files(), before + (t.named() ? 1 : 0));  // unnamed: nothing a signal must remove
    EXPECT_TRUE(fs::exists(t.path()));
    throw Error("mid-write");
  } catch (const Error&) {
  }
  EXPECT_EQ(registered_temp_files(), before);
  EXPECT_TRUE(fs::is_empty(d.p)) << "an uncommitted TempOutput left a file";

  {
    TempOutput t(out);
    ASSERT_EQ(::write(t.fd(), "abc", 3), 3);
    t.commit();
  }
  EXPECT_EQ(registered_temp_files(), before);
  std::string text;
  std::ifstream(out) >> text;
  EXPECT_EQ(text, "abc");
  EXPECT_EQ(std::distance(fs::directory_iterator(d.p), fs::directory_iterator{}), 1);
}

// The same with the named fallback (a file system without O_TMPFILE).
TEST(TempOutput, TheNamedFallbackCommitsAndRemoves) {
  TempOutput::force_named_for_tests(true);
  Dir d;
  const std::string out = (d.p / "model.gguf").string();
  try {
    TempOutput t(out);
    EXPECT_TRUE(t.named());
    EXPECT_EQ(t.path(), output_tmp_path(out));
    EXPECT_TRUE(fs::exists(t.path()));
    throw Error("mid-write");
  } catch (const Error&) {
  }
  EXPECT_TRUE(fs::is_empty(d.p));
  {
    TempOutput t(out);
    ASSERT_EQ(::write(t.fd(), "abc", 3), 3);
    t.commit();
  }
  TempOutput::force_named_for_tests(false);
  EXPECT_EQ(fs::file_size(out), 3u);
  EXPECT_EQ(std::distance(fs::directory_iterator(d.p), fs::directory_iterator{}), 1);
}

// Issue 42: a writer killed with SIGKILL (the OOM killer) mid-write leaves
// nothing beside its output: the temp file has no name until commit().
TEST(TempOutput, ASigkilledWriterLeavesNothing) {
  Dir d;
  const std::string out = (d.p / "big.gguf").string();
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    TempOutput t(out);
    const std::string chunk(1 << 20, 'x');
    for (int i = 0; i < 4; ++i) output_path_detail::write_all_fd(t.fd(), out, chunk);
    (void)::write(ready[1], "w", 1);
    ::pause();  // killed here, mid-write
    ::_exit(3);
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  std::string left;
  for (const auto& e : fs::directory_iterator(d.p)) left += e.path().filename().string() + " ";
  EXPECT_EQ(left, "") << "a killed writer left files";
}

// Where O_TMPFILE is missing, a writer clears the OUT.tmp.PID files of dead
// processes (untouched for ten minutes), and nothing else: not a live
// process's, not a recent one, not a link (never followed), not another
// output's.
TEST(TempOutput, TheNamedFallbackClearsStaleTempFilesOfDeadProcesses) {
  Dir d;
  const std::string out = (d.p / "o.bin").string(), victim = d.file("victim.txt");
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string stale = out + ".tmp." + std::to_string(dead), recent = d.file("o.bin.tmp.999999998"),
                    live = out + ".tmp." + std::to_string(::getppid()), link = out + ".tmp.999999997",
                    other = d.file(("p.bin.tmp." + std::to_string(dead)).c_str());
  std::ofstream(stale) << "stale";
  std::ofstream(live) << "live";
  fs::create_symlink(victim, link);
  const struct timeval old[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
  for (const std::string& f : {stale, live, other}) ASSERT_EQ(::utimes(f.c_str(), old), 0);
  ASSERT_EQ(::lutimes(link.c_str(), old), 0);
  TempOutput::force_named_for_tests(true);
  {
    TempOutput t(out);
    t.commit();
  }
  TempOutput::force_named_for_tests(false);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(recent));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_TRUE(fs::exists(other));
  std::string text;
  std::getline(std::ifstream(victim), text);
  EXPECT_EQ(text, "partial output");
}

// Issue 42: a link given as the output is written through (the file it leads
// to is replaced, beside it), never replaced itself; a link to nothing, or to
// a device, is refused and left as it is.
TEST(OutputPath, ALinkIsWrittenThroughNotReplaced) {
  Dir d;
  fs::create_directories(d.p / "real");
  const std::string target = (d.p / "real" / "x.json").string(), link = (d.p / "link.json").string();
  std::ofstream(target) << "old";
  fs::create_symlink("real/x.json", link);
  write_output_file(link, "new");
  EXPECT_TRUE(fs::is_symlink(link));
  std::string text;
  std::getline(std::ifstream(target), text);
  EXPECT_EQ(text, "new");
  EXPECT_EQ(std::distance(fs::directory_iterator(d.p / "real"), fs::directory_iterator{}), 1);
  EXPECT_EQ(std::distance(fs::directory_iterator(d.p), fs::directory_iterator{}), 2);

  const std::string dangling = (d.p / "dangling").string();
  fs::create_symlink(d.p / "nowhere" / "x", dangling);
  try {
    write_output_file(dangling, "x");
    FAIL() << "wrote through a link to nothing";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("symbolic link to nothing"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_symlink(dangling));
  EXPECT_FALSE(fs::exists(d.p / "nowhere"));
  EXPECT_THROW(TempOutput t(dangling), Error);

  const std::string to_null = (d.p / "null").string();
  fs::create_symlink("/dev/null", to_null);
  EXPECT_NE(output_path_problem(to_null, {}).find("not a regular file"), std::string::npos);
  EXPECT_THROW(write_output_file(to_null, "x"), Error);
  EXPECT_TRUE(fs::is_symlink(to_null));

  // Through an open descriptor (as /dev/stdout > FILE): the descriptor would
  // keep the replaced file; refused.
  const int fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const std::string via_fd = (d.p / "via-fd").string();
  fs::create_symlink("/proc/self/fd/" + std::to_string(fd), via_fd);
  EXPECT_NE(output_path_problem(via_fd, {}).find("open file descriptor"), std::string::npos);
  EXPECT_THROW(write_output_file(via_fd, "x"), Error);
  EXPECT_TRUE(fs::is_symlink(via_fd));
  ::close(fd);
  std::getline(std::ifstream(target), text);
  EXPECT_EQ(text, "new");
}

// Issue 42: a batch job's results file is never replaced by another writer:
// recognised by its first line, or held by a running job's lock.
TEST(OutputPath, AnotherRunsResultsAreNeverReplaced) {
  Dir d;
  const std::string res = (d.p / "a.jsonl").string(), text = "{\"id\":\"p0\",\"text\":\"hi\",\"finish_reason\":\"stop\"}\n";
  std::ofstream(res) << text;
  EXPECT_NE(output_path_problem(res, {}).find("holds a batch job's results"), std::string::npos);
  EXPECT_EQ(output_path_problem(res, {}, false, /*appends_results=*/true), "");
  EXPECT_THROW(write_output_file(res, "{}"), Error);
  {
    TempOutput t(res);  // checked again at the rename
    EXPECT_THROW(t.commit(), Error);
  }
  std::string got;
  std::getline(std::ifstream(res), got);
  EXPECT_EQ(got + "\n", text);
  EXPECT_EQ(std::distance(fs::directory_iterator(d.p), fs::directory_iterator{}), 1);

  // A prompt file (no finish_reason) is an ordinary file.
  const std::string prompts = (d.p / "p.jsonl").string();
  std::ofstream(prompts) << "{\"id\":\"p0\",\"prompt\":\"hi\"}\n";
  EXPECT_EQ(output_path_problem(prompts, {}), "");

  // Held by a running job (empty so far): refused while the lock is held.
  const std::string held = (d.p / "held.jsonl").string();
  std::ofstream(held).flush();
  const int fd = ::open(held.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  EXPECT_NE(output_path_problem(held, {}).find("another redwood run"), std::string::npos);
  EXPECT_THROW(write_output_file(held, "x"), Error);
  ::close(fd);
  EXPECT_EQ(output_path_problem(held, {}), "");
}

// Issue 42: a FIFO with no reader is not waited for forever.
TEST(OutputPath, AFifoWithoutAReaderIsAnErrorNotAHang) {
  Dir d;
  const std::string fifo = (d.p / "trace.fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int status = in_child([&] {
    ::alarm(20);  // the old code blocked in open() forever: die of SIGALRM
    try {
      write_output_file(fifo, "{}", /*fifo_ok=*/true);
    } catch (const Error& e) {
      ::_exit(std::string(e.what()).find("no reader") != std::string::npos ? 5 : 6);
    }
    ::_exit(7);
  });
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 5);
  EXPECT_TRUE(fs::is_fifo(fifo));
}

TEST(TempOutput, ALinkPlantedAtTheTempNameIsNotWrittenThrough) {
  Dir d;
  const std::string victim = d.file("victim.txt"), out = (d.p / "out.bin").string();
  fs::create_symlink(victim, output_tmp_path(out));
  fs::create_hard_link(victim, d.p / "hard.txt");
  {
    TempOutput t(out);
    ASSERT_EQ(::write(t.fd(), "new", 3), 3);
    t.commit();
  }
  ::unlink(output_tmp_path(out).c_str());
  ASSERT_EQ(::link((d.p / "hard.txt").c_str(), output_tmp_path(out).c_str()), 0);  // a hard link this time
  {
    TempOutput t(out);
    ASSERT_EQ(::write(t.fd(), "newer", 5), 5);
    t.commit();
  }
  std::string text;
  std::getline(std::ifstream(victim), text);
  EXPECT_EQ(text, "partial output");
  std::getline(std::ifstream(out), text);
  EXPECT_EQ(text, "newer");
}

TEST(TempOutput, AFatalSignalWhileOpenRemovesIt) {
  TempOutput::force_named_for_tests(true);  // (an unnamed one leaves nothing by construction)
  Dir d;
  const std::string out = (d.p / "out.rwpk").string();
  const int status = in_child([&] {
    ::signal(SIGTERM, SIG_DFL);
    remove_temp_files_on_signal();
    TempOutput t(out);
    if (!fs::exists(t.path())) ::_exit(4);
    ::raise(SIGTERM);
    ::_exit(3);
  });
  TempOutput::force_named_for_tests(false);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_TRUE(fs::is_empty(d.p));
}

// Two writes of one output at once in one process would share OUT.tmp.PID:
// the second is refused and the first's file is left alone.
TEST(TempOutput, ASecondWriteOfTheSameOutputIsRefused) {
  Dir d;
  const std::string out = (d.p / "x.bin").string();
  {
    TempOutput first(out);
    ASSERT_EQ(::write(first.fd(), "ab", 2), 2);
    try {
      TempOutput second(out);
      FAIL() << "two temp files under one name";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("already being written"), std::string::npos) << e.what();
    }
    EXPECT_EQ(fs::file_size(first.path()), 2u);
    first.commit();
  }
  EXPECT_EQ(fs::file_size(out), 2u);
  const TempOutput again(out);  // free once the first is gone
}

TEST(TempOutput, AnUncreatableTempFileIsAnErrorNamingTheOutput) {
  try {
    TempOutput t("/nonexistent-dir/out.gguf");
    FAIL() << "created";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("/nonexistent-dir/out.gguf: cannot create: ", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace redwood
