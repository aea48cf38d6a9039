// A run folder's identity (OUT/run.json), so that one folder never mixes two runs' checkpoints.
//   OUT/run.json  {"run_id": "...", "job_id": "...", "created": "..."}
// run_id names the run (every checkpoint's meta.json carries it; rotation deletes only the
// current run's checkpoints). job_id is the launcher's NANODDP_JOB_ID, the same for every restart
// of one `nanoddp run`: a restart resumes automatically only a run its own job started.
// A fresh run into a folder that holds another run is refused; with --overwrite the old folder is
// moved aside (OUT.previous-<run id>), never deleted.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanoddp::train {

struct RunInfo {
  std::string run_id;
  std::string job_id;  // empty when the run was not started by `nanoddp run`
};

// OUT/run.json, or nothing when the folder has none (a fresh folder, or a run of an older version).
std::optional<RunInfo> read_run_info(const std::string& out);
void write_run_info(const std::string& out, const RunInfo& info);

// A new run id: 16 hex digits from the clock and the OS's entropy source.
std::string new_run_id();
// The launcher's job id of this process (NANODDP_JOB_ID), or "" without the launcher.
std::string current_job_id();

// What of a run OUT holds ("run 1a2b... with checkpoints up to step 300"), or "" when it holds
// none: no run.json, no complete checkpoint, no metrics.jsonl.
std::string describe_run(const std::string& out);

// Renames OUT to OUT.previous-<run id or time> (with -2, -3, ... if taken) and returns that path.
std::string move_run_aside(const std::string& out);

// Moves every complete checkpoint of a step after `step` in OUT into
// OUT/checkpoints/after_step_<step> (with -2, -3, ... if taken; the name is not a checkpoint's, so
// nothing there is resumed or rotated) and returns their steps, with the folder in *dest; none:
// nothing is moved. Whichever run wrote them: one whose meta.json names another run, or none (a
// broken meta.json, an older nanoddp), would otherwise stay the folder's newest, for --resume
// latest and a launcher's restart, until this run passed its step, and a save of that step would
// then replace it. Moving keeps it.
std::vector<int64_t> set_aside_checkpoints_after(const std::string& out, int64_t step, std::string* dest);

}  // namespace nanoddp::train
