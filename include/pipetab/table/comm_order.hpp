// A runtime's communication order: where each rank posts its sends and receives (and its FSDP
// and gradient-reduction actions) among its compute ops, as PyTorch pipelining's compute+comms
// tables write it (reference pytorch-interop.md §1.4, §1.5). A table without one is a
// compute-only schedule; the PyTorch runtime gives it the order PyTorch's own lowering would
// (`pytorch_send_recv`).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pipetab {

struct ScheduleTable;

/// PyTorch's non-compute action types (`_ComputationType`).
enum class CommKind : std::uint8_t {
  SendF,       ///< SEND_F: stage s sends its forward output to stage s+1
  RecvF,       ///< RECV_F: stage s receives the forward input from stage s-1
  SendB,       ///< SEND_B: stage s sends its input gradient to stage s-1
  RecvB,       ///< RECV_B: stage s receives its output gradient from stage s+1
  Unshard,     ///< UNSHARD: FSDP all-gather of the stage's parameters (no microbatch)
  Reshard,     ///< RESHARD: FSDP frees them again (no microbatch)
  ReduceGrad,  ///< REDUCE_GRAD: the stage's gradient reduction across replicas (no microbatch)
};

/// "SEND_F", "RECV_F", "SEND_B", "RECV_B", "UNSHARD", "RESHARD", "REDUCE_GRAD"; and back.
std::string_view to_string(CommKind kind) noexcept;
std::optional<CommKind> parse_comm_kind(std::string_view text) noexcept;

/// Whether actions of this kind name a microbatch (sends and receives do, FSDP ones do not).
constexpr bool has_microbatch(CommKind kind) noexcept {
  return kind == CommKind::SendF || kind == CommKind::RecvF || kind == CommKind::SendB ||
         kind == CommKind::RecvB;
}
constexpr bool is_send(CommKind kind) noexcept {
  return kind == CommKind::SendF || kind == CommKind::SendB;
}
constexpr bool is_receive(CommKind kind) noexcept {
  return kind == CommKind::RecvF || kind == CommKind::RecvB;
}

/// One action of a rank's list. `before` places it: the number of the rank's compute ops that
/// precede it in the list (0: before the first; the row's size: after the last).
struct CommAction {
  std::int32_t microbatch = -1;  ///< -1 for the kinds without one
  std::uint16_t stage = 0;
  CommKind kind = CommKind::SendF;
  std::int32_t before = 0;

  friend bool operator==(const CommAction&, const CommAction&) = default;
};

/// PyTorch action syntax: "0SEND_F1", "2RECV_B0", "1UNSHARD".
std::string to_string(const CommAction& action);

/// Per device, its communication actions in list order (compressed rows, like the table's).
/// Empty (`row_begin == {0}`) for a compute-only table.
struct CommOrder {
  std::vector<std::int64_t> row_begin{0};
  std::vector<CommAction> actions;

  bool empty() const noexcept { return actions.empty(); }
  std::span<const CommAction> row(int device) const noexcept {
    if (actions.empty()) return {};
    const auto b = row_begin[static_cast<std::size_t>(device)];
    const auto e = row_begin[static_cast<std::size_t>(device) + 1];
    return {actions.data() + b, static_cast<std::size_t>(e - b)};
  }
  friend bool operator==(const CommOrder&, const CommOrder&) = default;
};

/// The sends and receives PyTorch's `_add_send_recv` (torch/distributed/pipelining/
/// schedules.py) adds to a compute-only table: ranks take turns in rank order, each placing its
/// next op once its input is local or its receive is already in its list; an op whose consumer
/// sits on another device is followed by its send, and the receive is appended to the
/// consumer's list at that moment. Generalised to any placement (the device of each pass) and to
/// overlapped pairs (ready when both halves are; sends in half order). PyTorch's runtime drops
/// idle cells before this pass (`_add_unshard_reshard` compacts each list); with `idle_slots`
/// a table's explicit idle cells take turns instead, as when `_add_send_recv` is called on a
/// padded table (its tests do), which places receives differently. Precondition: a valid table
/// (which never stalls the turns).
CommOrder pytorch_send_recv(const ScheduleTable& table, bool idle_slots = false);

/// A problem with a table's communication order: the device, the index of the action in its
/// comm row (or -1 when the problem is a missing action) and what is wrong.
struct CommIssue {
  std::int32_t device = 0;
  std::int64_t action = -1;
  std::string message;
};

/// Checks `table.comms` against the table's data flow: every cross-device dependency has one
/// send on the producer's device after the producer and one receive on the consumer's device
/// before the consumer; no send or receive is duplicated, stays on one device or serves no
/// dependency; stages and microbatches exist. The first problem, or nullopt.
std::optional<CommIssue> check_comm_order(const ScheduleTable& table);

/// NCCL's default buffer for one pair of ranks (NCCL_BUFFSIZE, 4 MiB): a send whose message
/// fits completes without its receive; a larger one waits until the receive is posted.
inline constexpr double kNcclBufferBytes = 4194304.0;

/// How the point-to-point check sizes sends: `bytes(send)` is the message of a SEND_F or SEND_B
/// action (no function: every message fits the buffer); a send of more than `buffer_bytes`
/// completes only once its receive is posted (NCCL's point-to-point semantics, docs/pytorch.md).
struct SendSizes {
  std::function<double(const CommAction& send)> bytes;
  double buffer_bytes = kNcclBufferBytes;
};

/// Runs each rank's list as NCCL and PyTorch's runtime do, and reports the first problem in the
/// list's terms: the action as written ("1RECV_F1"), its rank, its line (`file_lines`: the order
/// is a compute+comms file's, one line per rank) and its position among the line's actions, as
/// the file counts them. Two problems: the sends from one rank to another and that rank's
/// receives from it name different tensors in the same place (NCCL matches them in the order
/// they are posted); and a deadlock: every rank left waits, at a receive whose send never comes,
/// a send larger than the buffer whose receive is never posted, or an op whose receive never
/// completes. All transfers between a pair of ranks run on one stream, one at a time, in list
/// order. Precondition: `check_comm_order` accepts the order (both ends of every transfer).
std::optional<CommIssue> check_p2p(const ScheduleTable& table, const CommOrder& order,
                                   const SendSizes& sizes, bool file_lines);

/// One item of a device's list as PyTorch writes it: a compute op (index into `table.ops`) or a
/// communication action (index into the order's `actions`).
struct ListItem {
  bool comm = false;
  std::int64_t index = 0;
};

/// Device `device`'s list with compute ops and the actions of `order` (by default the table's
/// own) merged in order.
std::vector<ListItem> merged_row(const ScheduleTable& table, const CommOrder& order, int device);
std::vector<ListItem> merged_row(const ScheduleTable& table, int device);

/// Merges each I immediately followed (in its device's order) by the W of the same stage and
/// microbatch into one full backward B, as PyTorch's `_merge_bw` does before lowering its
/// zero-bubble tables in tests. Drops explicit slots and the communication order.
ScheduleTable merge_split_backward(const ScheduleTable& table);

}  // namespace pipetab
