#include "worker/command_executor.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "common/utf8.h"
#include "worker/metric_line.h"

namespace hpo::worker {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// Longer lines are cut into pieces: a program printing megabytes without a
// newline must not grow the worker's memory without bound.
constexpr size_t kMaxLineBytes = size_t{64} * 1024;
constexpr size_t kReadChunk = size_t{64} * 1024;
// How often stop_requested() and the deadline are checked while the program
// is quiet; the contract is to stop within about a second.
constexpr std::chrono::milliseconds kPollInterval{100};
// With both pipes closed nothing wakes the loop when the program exits, so it
// looks more often than kPollInterval to end the trial promptly.
constexpr std::chrono::milliseconds kExitPollInterval{20};
// After the program exits its pipes are read until empty; this bounds it in
// case something still writes.
constexpr size_t kMaxDrainBytes = size_t{16} * 1024 * 1024;
constexpr std::string_view kNote = "[hpo-worker] ";

// GNU and XSI strerror_r differ in return type; either way this is the text.
[[maybe_unused]] const char* StrerrorText(int rc, const char* buf) {
  return rc == 0 ? buf : "unknown error";
}
[[maybe_unused]] const char* StrerrorText(const char* text, const char*) { return text; }

std::string ErrnoText(int err) {
  char buf[256] = {0};
  return StrerrorText(strerror_r(err, buf, sizeof(buf)), buf);
}

std::string SignalText(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  std::string text = "killed by signal " + std::to_string(sig);
  if (abbrev != nullptr) text += std::string(" (SIG") + abbrev + ")";
  return text;
}

// The longest TrialRun::timeout_ms taken: the server's bound on
// executor.command.timeout_s (ten years). Beyond it, adding the timeout to
// the clock's now (in nanoseconds) could overflow.
constexpr int64_t kMaxTimeoutMs = int64_t{3650} * 86'400 * 1000;

// "3", "1.5", "0.25": a timeout as a person would write it.
std::string SecondsText(int64_t ms) {
  std::string text = std::to_string(ms / 1000);
  if (ms % 1000 != 0) {
    std::string frac = std::to_string(1000 + ms % 1000).substr(1);
    while (frac.back() == '0') frac.pop_back();
    text += "." + frac;
  }
  return text;
}

// The last lines of output, bounded in lines and bytes.
class LogTail {
 public:
  LogTail(size_t max_lines, size_t max_bytes)
      : max_lines_(max_lines),
        max_bytes_(max_bytes),
        // One long line (a progress bar, a dumped tensor) must not push
        // every other line out of the tail, so each keeps at most an eighth.
        max_line_bytes_(std::min(std::max<size_t>(max_bytes / 8, 80), max_bytes - 1)) {}

  void Add(std::string_view raw) {
    if (max_lines_ == 0 || max_bytes_ < 2) return;
    static constexpr std::string_view kCut = " [...]";
    const bool cut = raw.size() > max_line_bytes_;
    std::string line = ValidUtf8(raw.substr(0, max_line_bytes_));
    if (cut) line += kCut;
    if (line.size() > max_line_bytes_) {
      // Shorten to fit, at a character boundary (replacements and the mark
      // may have grown it).
      size_t end = max_line_bytes_ - (cut ? kCut.size() : 0);
      while (end > 0 && (static_cast<unsigned char>(line[end]) & 0xC0) == 0x80) --end;
      line.resize(end);
      if (cut) line += kCut;
    }
    bytes_ += line.size() + 1;
    lines_.push_back(std::move(line));
    while (lines_.size() > max_lines_ || bytes_ > max_bytes_) {
      bytes_ -= lines_.front().size() + 1;
      lines_.pop_front();
    }
  }

  std::string Text() const {
    std::string text;
    text.reserve(bytes_);
    for (const auto& line : lines_) {
      if (!text.empty()) text.push_back('\n');
      text += line;
    }
    return text;
  }

 private:
  const size_t max_lines_;
  const size_t max_bytes_;
  const size_t max_line_bytes_;
  std::deque<std::string> lines_;
  size_t bytes_ = 0;
};

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  int Release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

// A JSON float that holds an integer exactly (|x| <= 2^53), as that integer.
std::optional<int64_t> IntegralDouble(const json& v) {
  if (!v.is_number_float()) return std::nullopt;
  const double d = v.get<double>();
  if (!(std::fabs(d) <= 9007199254740992.0) || d != std::floor(d)) return std::nullopt;
  return static_cast<int64_t>(d);
}

// A JSON scalar as an environment variable's value: 128 rather than 128.0.
std::string ScalarText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (auto n = IntegralDouble(v)) return std::to_string(*n);
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string DumpJson(const json& v) {
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

Status WriteFileAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return Status::Internal("cannot write " + tmp + ": " + ErrnoText(errno));
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd.get(), content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Internal("cannot write " + tmp + ": " + ErrnoText(errno));
    done += static_cast<size_t>(n);
  }
  fd.Reset();
  // The program may read the file at any moment; rename makes it see the
  // old setting or the new one, never half of one.
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::Internal("cannot rename " + tmp + ": " + ErrnoText(errno));
  }
  return Status::OK();
}

bool IsExecutableFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// argv[0] as posix_spawn needs it. The lookup uses the program's own PATH
// (posix_spawnp would use the worker's), and relative PATH entries are taken
// relative to the program's working directory, where it will run.
Result<std::string> ResolveProgram(const std::string& name,
                                   const std::map<std::string, std::string>& env,
                                   const std::string& working_dir) {
  if (name.find('/') != std::string::npos) return name;
  auto it = env.find("PATH");
  const std::string path = it != env.end() ? it->second : "/usr/local/bin:/usr/bin:/bin";
  size_t begin = 0;
  while (true) {
    const size_t end = std::min(path.find(':', begin), path.size());
    std::string dir = path.substr(begin, end - begin);
    if (dir.empty()) dir = ".";
    // Returned as is: the program is started after the change of directory.
    const std::string candidate = dir + "/" + name;
    const bool relative = dir.front() != '/' && !working_dir.empty();
    if (IsExecutableFile(relative ? working_dir + "/" + candidate : candidate)) return candidate;
    if (end == path.size()) break;
    begin = end + 1;
  }
  return Status::InvalidArgument("cannot run '" + name + "': not found on PATH (" + path + ")");
}

// A positive integer setting such as system.threads, whether the server sent
// it as a number or as a string.
std::optional<int64_t> PositiveInt(const json& v) {
  std::optional<int64_t> n;
  if (v.is_number_integer()) {
    n = v.get<int64_t>();
  } else if (v.is_number_float()) {
    n = IntegralDouble(v);
  } else if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    int64_t parsed = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), parsed);
    if (ec == std::errc() && end == s.data() + s.size()) n = parsed;
  }
  if (n && *n >= 1) return n;
  return std::nullopt;
}

// One run of one trial's program, from spawning it to collecting its end.
class CommandRun {
 public:
  CommandRun(const CommandExecutor::Options& options, const TrialRun& run, Reporter& reporter)
      : options_(options),
        run_(run),
        reporter_(reporter),
        buffer_(kReadChunk),
        tail_(options.tail_lines, options.tail_bytes),
        last_step_(run.resume_step) {}

  CommandRun(const CommandRun&) = delete;
  CommandRun& operator=(const CommandRun&) = delete;

  ~CommandRun() {
    if (pid_ > 0) {
      // Only on an error path: leave nothing running and no zombie.
      KillGroup(SIGKILL);
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
    if (!scratch_dir_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(scratch_dir_, ignored);
    }
  }

  Result<RunResult> Run() {
    HPO_RETURN_IF_ERROR(Prepare());
    // A trial cancelled while it waited to start need not start at all.
    if (reporter_.stop_requested()) {
      RunResult stopped;
      stopped.stopped = true;
      return stopped;
    }
    HPO_RETURN_IF_ERROR(Spawn());
    return Supervise();
  }

 private:
  // kPausing: the stop step was reported and answered kPause; the program
  // is saving its state and should exit 0 by itself. kPauseTimedOut: it did
  // not within Options::pause_grace and is being stopped.
  enum class Ending { kNone, kStopped, kTimedOut, kPausing, kPauseTimedOut };

  struct Stream {
    Fd fd;
    bool is_stdout = false;
    std::string partial;  // a line not ended yet
  };

  Status Prepare() {
    if (run_.argv.empty()) return Status::InvalidArgument("command: argv is empty");
    for (const auto& arg : run_.argv) {
      if (arg.find('\0') != std::string::npos) {
        return Status::InvalidArgument("command: an argument holds a NUL character");
      }
    }
    if (run_.argv[0].empty()) return Status::InvalidArgument("command: argv[0] is empty");
    if (!options_.working_dir.empty()) {
      struct stat st {};
      if (::stat(options_.working_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        return Status::FailedPrecondition("working directory '" + options_.working_dir +
                                          "' is not a directory");
      }
    }
    if (run_.stop_step < 0 || run_.resume_step < 0) {
      return Status::InvalidArgument("stop_step and resume_step: must not be negative");
    }
    if (run_.timeout_ms > kMaxTimeoutMs) {
      return Status::InvalidArgument("timeout: " + SecondsText(run_.timeout_ms) +
                                     " s is more than the most, " + SecondsText(kMaxTimeoutMs) +
                                     " s (ten years)");
    }
    current_system_ = run_.system.is_object() ? run_.system : json::object();
    for (auto it = current_system_.begin(); it != current_system_.end(); ++it) {
      system_keys_.insert(it.key());
    }
    HPO_RETURN_IF_ERROR(MakeScratch());
    HPO_RETURN_IF_ERROR(BuildEnvironment());
    HPO_ASSIGN_OR_RETURN(program_, ResolveProgram(run_.argv[0], env_, options_.working_dir));
    return Status::OK();
  }

  Status MakeScratch() {
    std::string base = options_.scratch_dir;
    if (base.empty()) {
      const char* tmpdir = std::getenv("TMPDIR");
      base = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
    }
    std::string pattern = base + "/hpo-trial-" + std::to_string(run_.trial_id) + "-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      return Status::Internal("cannot make a scratch directory in " + base + ": " +
                              ErrnoText(errno));
    }
    scratch_dir_ = pattern;
    system_file_ = scratch_dir_ + "/system.json";
    // The worker's directory when it keeps one for the trial (it uploads
    // what is left there); else one that goes with the scratch directory.
    std::error_code ec;
    checkpoint_dir_ = run_.checkpoint_dir.empty()
                          ? scratch_dir_ + "/checkpoint"
                          : std::filesystem::absolute(run_.checkpoint_dir, ec).string();
    std::filesystem::create_directories(checkpoint_dir_, ec);
    if (ec)
      return Status::Internal("cannot make the checkpoint directory " + checkpoint_dir_ + ": " +
                              ec.message());
    return WriteFileAtomically(system_file_, DumpJson(current_system_) + "\n");
  }

  Status BuildEnvironment() {
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      const std::string_view kv(*e);
      const size_t eq = kv.find('=');
      if (eq == std::string_view::npos || eq == 0) continue;
      env_.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
    }
    // The worker's credentials stay with the worker (command_executor.h).
    env_.erase("HPO_TOKEN");
    env_.erase("HPO_TOKEN_FILE");
    for (const auto& [name, value] : run_.env) {
      if (name.empty() || name.find_first_of(std::string("=\0", 2)) != std::string::npos) {
        return Status::InvalidArgument("command: env: '" + name + "' is not a variable name");
      }
      if (value.find('\0') != std::string::npos) {
        return Status::InvalidArgument("command: env." + name + ": holds a NUL character");
      }
      env_[name] = value;
    }
    if (!env_.count("PYTHONUNBUFFERED")) env_["PYTHONUNBUFFERED"] = "1";

    env_["HPO_TRIAL_ID"] = std::to_string(run_.trial_id);
    env_["HPO_EXPERIMENT_ID"] = std::to_string(run_.experiment_id);
    env_["HPO_ATTEMPT"] = std::to_string(run_.attempt);
    env_["HPO_SEED"] = std::to_string(run_.seed);
    env_["HPO_MAX_STEPS"] = std::to_string(run_.max_steps);
    env_["HPO_OBJECTIVE"] = run_.objective_metric;
    env_["HPO_PARAMS"] = DumpJson(run_.params.is_null() ? json::object() : run_.params);
    env_["HPO_SYSTEM"] = DumpJson(current_system_);
    env_["HPO_SYSTEM_FILE"] = system_file_;
    env_["HPO_CHECKPOINT_DIR"] = checkpoint_dir_;
    // Unset unless this lease pauses or resumes, so that a program can test
    // for them (the worker's own environment may not pass them on).
    env_.erase("HPO_STOP_STEP");
    env_.erase("HPO_RESUME_STEP");
    if (run_.stop_step > 0) env_["HPO_STOP_STEP"] = std::to_string(run_.stop_step);
    if (run_.resume_step > 0) env_["HPO_RESUME_STEP"] = std::to_string(run_.resume_step);

    const std::string device = run_.device.empty() ? "cpu" : run_.device;
    env_["HPO_DEVICE"] = device;
    if (device == "cpu") {
      env_["CUDA_VISIBLE_DEVICES"] = "";  // the program must not take a GPU it was not given
    } else if (device.rfind("cuda:", 0) == 0 && device.size() > 5 &&
               device.find_first_not_of("0123456789", 5) == std::string::npos) {
      env_["CUDA_VISIBLE_DEVICES"] = device.substr(5);
    } else {
      return Status::InvalidArgument("device '" + device + "': must be cpu or cuda:N");
    }

    // The tuned setting wins over the device's thread count: speed is
    // measured and reported against the setting, so the program must use it.
    std::optional<int64_t> threads;
    if (current_system_.contains("threads")) {
      threads = PositiveInt(current_system_.at("threads"));
      if (!threads) return Status::InvalidArgument("system.threads: must be a positive integer");
    } else if (run_.threads > 0) {
      threads = run_.threads;
    }
    if (threads) {
      env_["HPO_THREADS"] = std::to_string(*threads);
      env_["OMP_NUM_THREADS"] = std::to_string(*threads);
    }
    if (current_system_.contains("batch_size")) {
      env_["HPO_BATCH_SIZE"] = ScalarText(current_system_.at("batch_size"));
    }
    return Status::OK();
  }

  Status Spawn() {
    int out[2];
    int err[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return Status::Internal("pipe: " + ErrnoText(errno));
    Fd out_read(out[0]);
    Fd out_write(out[1]);
    if (::pipe2(err, O_CLOEXEC) != 0) return Status::Internal("pipe: " + ErrnoText(errno));
    Fd err_read(err[0]);
    Fd err_write(err[1]);

    std::vector<char*> argv;
    argv.reserve(run_.argv.size() + 1);
    for (const auto& arg : run_.argv) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    std::vector<std::string> env_strings;
    env_strings.reserve(env_.size());
    for (const auto& [name, value] : env_) env_strings.push_back(name + "=" + value);
    std::vector<char*> envp;
    envp.reserve(env_strings.size() + 1);
    for (auto& kv : env_strings) envp.push_back(kv.data());
    envp.push_back(nullptr);

    // posix_spawn rather than fork: the worker maps LibTorch and may hold
    // gigabytes, which fork would copy page tables of, and it runs threads,
    // which make anything but async-signal-safe calls between fork and exec
    // unsafe. glibc reports exec failures as its return value.
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out_write.get(), STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err_write.get(), STDERR_FILENO);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    if (!options_.working_dir.empty()) {
      posix_spawn_file_actions_addchdir_np(&actions, options_.working_dir.c_str());
    }
    // The worker's sockets and files are none of the program's business.
    posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);

    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    // Its own process group, so stopping it reaches everything it started.
    // Signal mask and dispositions reset: the worker blocks or ignores
    // signals (SIGTERM for draining, SIGPIPE for sockets) that the program
    // must see as usual.
    posix_spawnattr_setflags(
        &attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    sigset_t all;
    sigfillset(&all);
    posix_spawnattr_setsigdefault(&attr, &all);

    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, program_.c_str(), &actions, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
      return Status::InvalidArgument("cannot run '" + run_.argv[0] + "': " + ErrnoText(rc));
    }
    pid_ = pid;
    started_ = Clock::now();

    for (Fd* fd : {&out_read, &err_read}) {
      const int flags = ::fcntl(fd->get(), F_GETFL);
      ::fcntl(fd->get(), F_SETFL, flags | O_NONBLOCK);
    }
    streams_[0].fd.Reset(out_read.Release());
    streams_[0].is_stdout = true;
    streams_[1].fd.Reset(err_read.Release());
    return Status::OK();
  }

  Result<RunResult> Supervise() {
    std::optional<Clock::time_point> deadline;
    if (run_.timeout_ms > 0) deadline = started_ + std::chrono::milliseconds(run_.timeout_ms);
    while (true) {
      auto wait = std::chrono::duration_cast<Clock::duration>(kPollInterval);
      const auto now = Clock::now();
      if (deadline && ending_ == Ending::kNone) wait = std::min(wait, *deadline - now);
      if (kill_at_) wait = std::min(wait, *kill_at_ - now);
      pollfd fds[2];
      Stream* polled[2];
      nfds_t n = 0;
      for (auto& s : streams_) {
        if (!s.fd.valid()) continue;
        fds[n] = pollfd{s.fd.get(), POLLIN, 0};
        polled[n++] = &s;
      }
      if (n == 0) {
        wait = std::min(wait, std::chrono::duration_cast<Clock::duration>(kExitPollInterval));
      }
      const auto wait_ms =
          std::max<int64_t>(0, std::chrono::ceil<std::chrono::milliseconds>(wait).count());
      const int ready = ::poll(fds, n, static_cast<int>(wait_ms));
      if (ready < 0 && errno != EINTR) return Status::Internal("poll: " + ErrnoText(errno));
      for (nfds_t i = 0; ready > 0 && i < n; ++i) {
        // One read per stream per round, so a chatty program cannot starve
        // the stop and deadline checks below.
        if (fds[i].revents != 0) ReadOnce(*polled[i]);
      }

      if (ending_ == Ending::kNone || ending_ == Ending::kPausing) {
        if (reporter_.stop_requested()) {
          // Pruned or cancelled meanwhile (or the worker is leaving): there
          // is nothing to pause any more.
          BeginStop(Ending::kStopped);
        } else if (ending_ == Ending::kNone && deadline && Clock::now() >= *deadline) {
          BeginStop(Ending::kTimedOut);
        } else if (ending_ == Ending::kPausing && Clock::now() >= *pause_deadline_) {
          BeginStop(Ending::kPauseTimedOut);
        }
      }
      if (kill_at_ && Clock::now() >= *kill_at_) {
        KillGroup(SIGKILL);
        kill_at_.reset();
      }
      HPO_ASSIGN_OR_RETURN(bool exited, Exited());
      if (exited) break;
    }
    // The program is a zombie until reaped, so its process group id cannot
    // have been reused: kill what it left behind, then reap it.
    KillGroup(SIGKILL);
    Drain();
    for (auto& s : streams_) FlushPartial(s);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0) {
      if (errno != EINTR) return Status::Internal("waitpid: " + ErrnoText(errno));
    }
    pid_ = -1;
    return Outcome(status);
  }

  Result<RunResult> Outcome(int status) {
    if (lines_past_last_step_ > 0) {
      Note(std::to_string(lines_past_last_step_) + " metric line(s) past step " +
           std::to_string(run_.max_steps) +
           " (HPO_MAX_STEPS, the spec's budget.steps_per_trial) not reported");
    }
    RunResult result;
    result.final_metrics = last_metrics_;
    result.log_tail = tail_.Text();
    auto with_tail = [&result](const std::string& what) {
      if (result.log_tail.empty()) return what + "; no output";
      return what + "; last output:\n" + result.log_tail;
    };
    if (ending_ == Ending::kStopped) {
      result.stopped = true;
      return result;
    }
    if (ending_ == Ending::kPausing || ending_ == Ending::kPauseTimedOut) {
      result.paused = true;
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      std::error_code ec;
      if (ending_ == Ending::kPauseTimedOut) {
        result.checkpoint_error = "the program did not exit within " +
                                  SecondsText(options_.pause_grace.count()) + " s of its stop step";
      } else if (WIFSIGNALED(status)) {
        result.checkpoint_error =
            "the program was " + SignalText(WTERMSIG(status)) + " after its stop step";
      } else if (code != 0) {
        result.checkpoint_error =
            "the program ended with exit status " + std::to_string(code) + " after its stop step";
      } else if (std::filesystem::is_empty(checkpoint_dir_, ec) || ec) {
        result.checkpoint_error =
            "the program left HPO_CHECKPOINT_DIR empty (it saves nothing to resume from)";
      } else {
        result.checkpoint_saved = true;
      }
      if (!result.checkpoint_saved) Note("no checkpoint: " + result.checkpoint_error);
      result.log_tail = tail_.Text();
      return result;
    }
    if (ending_ == Ending::kTimedOut) {
      return Status::DeadlineExceeded(
          with_tail("timed out after " + SecondsText(run_.timeout_ms) + " s"));
    }
    if (WIFSIGNALED(status)) return Status::Internal(with_tail(SignalText(WTERMSIG(status))));
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code == CommandExecutor::kRestoreRefusedExitStatus && run_.resume_step > 0 && !reported_) {
      result.restore_error = with_tail("the program could not restore the state saved after step " +
                                       std::to_string(run_.resume_step) + " (exit status " +
                                       std::to_string(code) + ")");
      return result;
    }
    if (code != 0) {
      return Status::FailedPrecondition(with_tail("exit status " + std::to_string(code)));
    }
    if (!reported_) {
      // Most likely the program prints its metrics in a form not recognised;
      // saying so beats completing a trial that has no objective.
      std::string what = "the program exited without printing a metric line";
      what += run_.objective_metric.empty()
                  ? std::string(" (such as 'hpo: step=1 loss=0.5')")
                  : " (such as 'hpo: step=1 " + run_.objective_metric + "=0.5')";
      return Status::FailedPrecondition(with_tail(what));
    }
    return result;
  }

  Result<bool> Exited() {
    siginfo_t info{};
    // WNOWAIT: look without reaping, so the group id stays reserved.
    if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
      if (errno == EINTR) return false;
      return Status::Internal("waitid: " + ErrnoText(errno));
    }
    return info.si_pid == pid_;
  }

  void BeginStop(Ending why) {
    ending_ = why;
    KillGroup(SIGTERM);
    kill_at_ = Clock::now() + options_.kill_grace;
  }

  void KillGroup(int sig) {
    if (pid_ <= 0) return;
    ::kill(-pid_, sig);  // ESRCH: the group is gone already
    // Also the program itself, in case it moved to a group of its own.
    ::kill(pid_, sig);
  }

  // Returns the bytes read; 0 at end of file, on error or when nothing waits.
  size_t ReadOnce(Stream& s) {
    while (true) {
      const ssize_t n = ::read(s.fd.get(), buffer_.data(), buffer_.size());
      if (n > 0) {
        Consume(s, buffer_.data(), static_cast<size_t>(n));
        return static_cast<size_t>(n);
      }
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 || errno != EAGAIN) {
        FlushPartial(s);
        s.fd.Reset();
      }
      return 0;
    }
  }

  void Drain() {
    size_t drained = 0;
    for (auto& s : streams_) {
      while (s.fd.valid() && drained < kMaxDrainBytes) {
        const size_t n = ReadOnce(s);
        if (n == 0) break;
        drained += n;
      }
    }
  }

  void Consume(Stream& s, const char* data, size_t size) {
    size_t begin = 0;
    for (size_t i = 0; i < size; ++i) {
      if (data[i] != '\n') continue;
      const std::string_view piece(data + begin, i - begin);
      if (s.partial.empty()) {
        OnLine(s, piece);
      } else {
        s.partial.append(piece);
        OnLine(s, s.partial);
        s.partial.clear();
      }
      begin = i + 1;
    }
    while (begin < size) {
      const size_t take = std::min(size - begin, kMaxLineBytes - s.partial.size());
      s.partial.append(data + begin, take);
      begin += take;
      if (s.partial.size() >= kMaxLineBytes) {
        OnLine(s, s.partial);
        s.partial.clear();
      }
    }
  }

  void FlushPartial(Stream& s) {
    if (s.partial.empty()) return;
    OnLine(s, s.partial);
    s.partial.clear();
  }

  void Note(const std::string& text) { tail_.Add(std::string(kNote) + text); }

  void OnLine(const Stream& s, std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    tail_.Add(line);
    // After a stop, report nothing more.
    if (!s.is_stdout || ending_ != Ending::kNone) return;
    auto parsed = ParseMetricLine(line, system_keys_);
    if (!parsed.ok()) {
      Note("not a valid metric line: " + parsed.status().message());
      return;
    }
    if (!parsed->has_value()) return;
    MetricLine& m = **parsed;
    if (!run_.objective_metric.empty() && !m.metrics.count(run_.objective_metric)) {
      if (!warned_no_objective_) {
        Note("metric lines without '" + run_.objective_metric + "' are not reported");
        warned_no_objective_ = true;
      }
      return;
    }
    // (A step= of INT64_MAX followed by a line without one stays there.)
    const int64_t step = m.step ? *m.step : last_step_ + (last_step_ < INT64_MAX ? 1 : 0);
    last_step_ = step;
    // Past the trial's steps the server refuses the report, and a refused
    // report stops the trial: such lines are dropped instead, and the
    // program runs on to its end (it may still be saving what it made), so
    // thousands of them cost nothing but their parsing.
    if (run_.max_steps > 0 && step > run_.max_steps) {
      ++lines_past_last_step_;  // said once, at the end, where the tail keeps it
      return;
    }
    json system = run_.system.is_object() ? run_.system : json::object();
    system.update(m.system);
    // Applied: only what the line itself says the program ran; the rest of
    // `system` is the starting setting, assumed.
    const Verdict verdict =
        reporter_.ReportApplied(step, m.metrics, m.samples_per_sec.value_or(0.0), system,
                                m.system.is_object() ? m.system : json::object());
    reported_ = true;
    last_metrics_ = std::move(m.metrics);
    switch (verdict) {
      case Verdict::kContinue:
        break;
      case Verdict::kStop:
        BeginStop(Ending::kStopped);
        break;
      case Verdict::kPause:
        // The program saves its state and exits by itself (HPO_STOP_STEP);
        // nothing it prints from here on is reported.
        ending_ = Ending::kPausing;
        pause_deadline_ = Clock::now() + options_.pause_grace;
        break;
      case Verdict::kChangeSystem: {
        const json change = reporter_.new_system();
        if (change.is_object()) current_system_.update(change);
        Status written = WriteFileAtomically(system_file_, DumpJson(current_system_) + "\n");
        if (!written.ok()) Note("cannot pass on the new system setting: " + written.message());
        break;
      }
    }
  }

  const CommandExecutor::Options& options_;
  const TrialRun& run_;
  Reporter& reporter_;

  json current_system_ = json::object();  // the setting last asked for
  std::set<std::string, std::less<>> system_keys_;
  std::map<std::string, std::string> env_;
  std::string program_;
  std::string scratch_dir_;
  std::string system_file_;
  std::string checkpoint_dir_;

  pid_t pid_ = -1;
  Clock::time_point started_;
  Stream streams_[2];  // standard output, standard error
  std::vector<char> buffer_;
  Ending ending_ = Ending::kNone;
  std::optional<Clock::time_point> kill_at_;         // when SIGKILL is due
  std::optional<Clock::time_point> pause_deadline_;  // with kPausing: when to stop waiting

  LogTail tail_;
  // The step of the last line reported: a line without step= is the next
  // one, and a resumed program's first is resume_step + 1 (the contract).
  int64_t last_step_;
  bool reported_ = false;
  bool warned_no_objective_ = false;
  int64_t lines_past_last_step_ = 0;
  std::map<std::string, double> last_metrics_;
};

}  // namespace

Result<RunResult> CommandExecutor::Run(const TrialRun& run, Reporter& reporter) {
  CommandRun command(options_, run, reporter);
  return command.Run();
}

}  // namespace hpo::worker
