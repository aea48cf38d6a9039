// How long stopping workers get between the stop signal and SIGKILL.
//
// Note [a stop that saves]
// A worker told to stop by a signal to its launcher (Ctrl-C, a scheduler's SIGTERM, the SIGHUP of
// a closed terminal or a lost ssh session) saves before it exits: `nanoddp train` finishes its step
// (or evaluation) and writes a checkpoint. A SIGKILL before the save ends loses everything since
// the last one, so such a stop gets --stop_timeout, which by default ("auto") is torchrun's 30 s
// plus twice the longest save a worker of this node last reported. A worker reports a save by
// writing its duration in seconds ("12.5\n") to the file named by NANODDP_SAVE_SECONDS_FILE, one
// file per local rank in a folder of the launcher's that lives as long as the launcher does.
// A stop after a failure gets a given --stop_timeout too, but "auto" means 5 s there: a group with
// a failed rank cannot finish a collective save, and a restart resumes from the last complete
// checkpoint anyway. A second signal to the launcher sends SIGKILL at once in either case.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace nanoddp::dist {

// The folder of the save-duration files (Note [a stop that saves]).
class SaveTimes {
 public:
  // Makes the folder under $TMPDIR (or /tmp). When it cannot be made the workers get no file, and
  // "auto" gives the 30 s alone.
  SaveTimes();
  // Removes the folder and the files in it.
  ~SaveTimes();
  SaveTimes(const SaveTimes&) = delete;
  SaveTimes& operator=(const SaveTimes&) = delete;

  // Local rank L's file, for its NANODDP_SAVE_SECONDS_FILE; "" when there is no folder.
  std::string path(int local_rank) const;
  // The longest save the first `nproc` local ranks reported, in seconds; nullopt when none did
  // (no file yet, or a file that does not hold a finite number of seconds >= 0).
  std::optional<double> longest(int nproc) const;

 private:
  std::string dir_;
};

// The time the workers get, and why, for the launcher's messages.
struct StopGrace {
  std::chrono::milliseconds grace{0};
  std::string why;  // "--stop_timeout auto: 30 s, plus twice the last save's 4.2 s"
};

// The grace of one stop. `stop_timeout`: the flag, nullopt for "auto". `to_save`: the job was asked
// to stop by a signal (the workers save), rather than stopped after a failure. `last_save_s`:
// SaveTimes::longest().
StopGrace stop_grace(std::optional<std::chrono::milliseconds> stop_timeout, bool to_save,
                     std::optional<double> last_save_s);

}  // namespace nanoddp::dist
