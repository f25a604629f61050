// Temp output files and fatal signals (src/util/temp_files.h, used by every
// writer through output_path.h, `redwood pack` and the GGUF writer): a
// signal that ends the process removes the registered temp files, leaves
// other files alone, and the process still dies of that signal; an ignored
// signal (nohup) stays ignored. Each case runs in a forked child.
#include <gtest/gtest.h>
#include <signal.h>
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
    EXPECT_EQ(registered_temp_files(), before + 1);
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
