// The runtimes' orders (lowering.hpp's Lowering, docs/design.md §6): the pipeline transfers
// between stages, sent at Megatron-LM's step boundaries (its interleaved schedule's steady-state
// pairs, run as one overlapped step with --a2a-overlap) or where PyTorch's list of actions posts
// them.
#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "lowering.hpp"
#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/table/comm_order.hpp"

namespace pipetab::detail {

// Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm, reference modern-runs.md
// §C.3 rule 2): in the interleaved schedule's steady state (one pipeline, stage s on device
// s mod devices, more stages than devices), each forward and the backward after it, the pairs
// Megatron-LM's runtime runs as one step (steady_pairs), run as one overlapped step
// (op_program(F, B, PairOrder::Megatron)): the forward's op runs both, once the backward's input is
// in too (merged_into_), and the backward's op is left empty. Without pipelining (one device, one
// stage) Megatron-Core pairs the same way each forward with the backward after it
// (combined_1f1b_schedule_for_no_pipelining, megatron/core/pipeline_parallel/combined_1f1b.py
// @d98e8a6), its row F0, then F(i+1) B(i) for each i, then the last B: a one-device table in
// another order (GPipe's, or 1F1B's without the extra forward) would run without the overlap, so
// it is refused rather than simulated as if overlapped. Other tables have no such steps.
bool Lowering::combines_steps() const {
  if (t_.pipelines() != 1) return false;
  if (!pipelined() && t_.stages == 1) {
    const auto n = static_cast<std::int64_t>(t_.ops.size());
    const auto is = [&](std::int64_t i, PassKind kind, std::int64_t microbatch) {
      const auto& op = t_.ops[static_cast<std::size_t>(i)];
      return !op.is_pair() && op.first().kind == kind && op.first().microbatch == microbatch;
    };
    const std::int64_t m = t_.microbatches;
    if (n != 2 * m || !is(0, PassKind::F, 0) || !is(n - 1, PassKind::B, m - 1)) return false;
    for (std::int64_t i = 0; i + 1 < m; ++i)
      if (!is(1 + 2 * i, PassKind::F, i + 1) || !is(2 + 2 * i, PassKind::B, i)) return false;
    return true;
  }
  if (t_.stages <= t_.devices) return false;
  for (int s = 0; s < t_.stages; ++s)
    if (t_.placement.device_of(0, s) != s % t_.devices) return false;
  return true;
}
void Lowering::combine_1f1b(std::int32_t d) {
  // Without pipelining every forward after the first runs with the backward after it
  // (combines_steps checked the order): no warm-up rule keeps the second forward alone.
  std::vector<std::int64_t> pairs;
  if (!pipelined() && t_.stages == 1) {
    for (std::int64_t i = 1; i + 1 < static_cast<std::int64_t>(t_.ops.size()); i += 2)
      pairs.push_back(i);
  } else {
    pairs = steady_pairs(d);
  }
  for (const auto i : pairs) {
    const auto fi = static_cast<std::size_t>(i), bi = fi + 1;
    const auto& f = t_.ops[fi];
    const auto& b = t_.ops[bi];
    if (f.first().microbatch == b.first().microbatch) continue;
    const auto id = program_id(f.first(), &b.first(), detail::PairOrder::Megatron);
    if (id < 0) continue;
    if (merged_into_.empty()) merged_into_.assign(t_.ops.size(), -1);
    set_program(fi, id);
    set_program(bi, -1);
    if (!folded_waits_.empty()) folded_waits_[fi] = folded_waits_[bi] = 0.0;  // the pair's own
    merged_into_[bi] = static_cast<std::int32_t>(i);
    auto& cf = op_cost_[fi];
    auto& cb = op_cost_[bi];
    cf += cb;  // one step: the host issues both passes' kernels
    cb = {};
    // Memory: the step runs the two passes layer by layer in turn, each of the backward's
    // layers freeing what it kept while the forward's next one allocates, so the step holds
    // their difference, not the forward's whole activation on top of the backward's (one
    // layer's activation in between left out). Not with activation offload, whose copies
    // move the bytes on their own.
    if (!offloads(job_)) {
      const double net = g_.alloc_bytes[fi] - g_.free_bytes[bi];
      g_.alloc_bytes[fi] = std::max(0.0, net);
      g_.free_bytes[fi] += std::max(0.0, -net);
      g_.free_bytes[bi] = 0.0;
    }
  }
}

// A cross-device dependency becomes producer → transfer → consumer; a same-device one is
// already ordered by the device's stream (a valid table runs the producer first).
void Lowering::depend(std::int32_t consumer, const Pass& pass, std::int32_t producer,
                      TransferKind kind, double bytes) {
  // A backward run inside the forward before it (combine_1f1b) needs its input there.
  if (!merged_into_.empty() && merged_into_[static_cast<std::size_t>(consumer)] >= 0)
    consumer = merged_into_[static_cast<std::size_t>(consumer)];
  const int stage = pass.stage;
  const auto from = g_.device[static_cast<std::size_t>(producer)];
  const auto to = g_.device[static_cast<std::size_t>(consumer)];
  if (from == to) return;
  const auto transfer = add_transfer(kind, stage, from, to, bytes);
  edge(transfer, consumer);
  if (options_.runtime == Runtime::Megatron) {
    // Sent at the producer's step boundary, blocking the sender until it is delivered; moved
    // once the receiver has posted its receive at its last step boundary before the consumer.
    g_.blocks_sender.back() = 1;
    edge(step_end(producer), transfer);
    const auto row = t_.row_begin[static_cast<std::size_t>(to)];
    std::int64_t posted = leading_receive(producer, from, to);
    if (posted < 0) {
      posted = consumer - 1;
      if (posted >= row && !boundary_[static_cast<std::size_t>(posted)]) --posted;
    }
    if (posted >= row) edge(static_cast<std::int32_t>(posted), transfer);
    return;
  }
  edge(producer, transfer);
  // DualPipe's code waits for a chunk's sends before its next chunk (_commit_and_wait_comm);
  // its receives are posted ahead, so the transfer leaves when its producer ends.
  if (options_.runtime == Runtime::DualPipe) g_.blocks_sender.back() = 1;
  if (options_.runtime == Runtime::PyTorch) {
    auto& into = kind == TransferKind::Activation ? activation_in_ : gradient_in_;
    into[key(pass.microbatch, stage)] = transfer;
  }
}

// Megatron-LM communicates at step boundaries: after every op, except that its interleaved
// schedule (forward_backward_pipelining_with_interleaving; the tables with more stages than
// devices) runs a steady-state forward and the backward after it as one step, and exchanges
// their sends and the next two receives in one batch after the backward. A device whose
// warm-up holds every forward (M·v no more than its warm-up, Megatron's `all_warmup`) has no
// steady state: its last forward and first backward are separate steps.
void Lowering::megatron_steps() {
  boundary_.assign(t_.ops.size(), true);
  if (t_.stages <= t_.devices) return;
  nth_of_kind_.assign(t_.ops.size(), -1);
  of_kind_.assign(static_cast<std::size_t>(t_.devices), {});
  for (std::int32_t d = 0; d < t_.devices; ++d) {
    for (const auto i : steady_pairs(d))
      boundary_[static_cast<std::size_t>(i)] = false;
    auto& lists = of_kind_[static_cast<std::size_t>(d)];
    for (auto i = t_.row_begin[static_cast<std::size_t>(d)];
         i < t_.row_begin[static_cast<std::size_t>(d) + 1]; ++i) {
      const auto& op = t_.ops[static_cast<std::size_t>(i)];
      if (op.is_pair() || (op.first().kind != PassKind::F && op.first().kind != PassKind::B))
        continue;
      auto& list = lists[op.first().kind == PassKind::F ? 0 : 1];
      nth_of_kind_[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(list.size());
      list.push_back(static_cast<std::int32_t>(i));
    }
  }
}

// Megatron-LM's interleaved schedule: the leading stage (the first device in the forward, the
// last in the backward) receives, in the exchange after its k-th forward (backward), what the
// ending stage produced in its (k - (S - 1))-th (recv_tensor_from_previous_stage), and queues
// it until its consumer runs. With a group size g > S that is g - S + 1 steps early
// (fwd_recv_buffer_size); posted just before the consumer instead, the ending stage's blocking
// send would wait for it and the pipeline would deadlock. The op after whose step the receive
// is posted, or -1 for any other transfer (posted in the step before its consumer).
std::int64_t Lowering::leading_receive(std::int32_t producer, std::int32_t from,
                                       std::int32_t to) const {
  if (nth_of_kind_.empty()) return -1;
  const auto last = t_.devices - 1;
  const auto& op = t_.ops[static_cast<std::size_t>(producer)];
  const bool forward = op.first().kind == PassKind::F;
  if (!(forward ? from == last && to == 0 : from == 0 && to == last)) return -1;
  const auto n = nth_of_kind_[static_cast<std::size_t>(producer)];
  if (n < 0) return -1;
  const auto& list = of_kind_[static_cast<std::size_t>(to)][forward ? 0 : 1];
  const auto k = static_cast<std::size_t>(n) + static_cast<std::size_t>(last);
  return k < list.size() ? step_end(list[k]) : -1;
}

// The forwards of device d's steady state that run with the backward after them as one step
// in Megatron-LM's interleaved schedule (a device whose warm-up holds every forward has none).
std::vector<std::int64_t> Lowering::steady_pairs(std::int32_t d) const {
  std::vector<std::int64_t> pairs;
  const auto begin = t_.row_begin[static_cast<std::size_t>(d)];
  const auto end = t_.row_begin[static_cast<std::size_t>(d) + 1];
  const auto is = [&](std::int64_t i, PassKind kind) {
    const auto& op = t_.ops[static_cast<std::size_t>(i)];
    return !op.is_pair() && op.first().kind == kind;
  };
  auto first_backward = begin;
  while (first_backward < end && is(first_backward, PassKind::F))
    ++first_backward;
  bool forward_after = false;
  for (auto i = first_backward; i < end && !forward_after; ++i)
    forward_after = is(i, PassKind::F);
  if (!forward_after) return pairs;  // all warm-up: no steady state
  for (auto i = begin; i + 1 < end; ++i) {
    if (is(i, PassKind::F) && is(i + 1, PassKind::B)) pairs.push_back(i);
  }
  return pairs;
}

// The op after which the step holding `op` ends.
std::int32_t Lowering::step_end(std::int32_t op) const {
  return boundary_[static_cast<std::size_t>(op)] ? op : op + 1;
}

void Lowering::pipeline_transfers() {
  if (options_.runtime == Runtime::Megatron) megatron_steps();
  if (!t_.comms.empty() && options_.runtime != Runtime::PyTorch) {
    throw ParamError(fmt::format(
        "the table carries its own communication order (a compute+comms file), which is "
        "PyTorch's runtime's: simulate it with --runtime pytorch, not {} (or drop the order "
        "by converting the file to compute-only)",
        to_string(options_.runtime)));
  }
  if (options_.runtime == Runtime::PyTorch) {
    if (const auto issue = check_comm_order(t_)) throw ParamError(issue->message);
    activation_in_.assign(forward_op_.size(), -1);
    gradient_in_.assign(forward_op_.size(), -1);
  }
  for (std::size_t n = 0; n < t_.ops.size(); ++n) {
    const auto consumer = static_cast<std::int32_t>(n);
    for (const Pass& pass : t_.ops[n].passes()) {
      if (pass.kind == PassKind::F && pass.stage > 0) {
        const Pass previous{pass.microbatch, static_cast<std::uint16_t>(pass.stage - 1),
                            PassKind::F};
        depend(consumer, pass, forward_op_[key(pass.microbatch, pass.stage - 1)],
               TransferKind::Activation, work(previous).message_bytes);
      } else if (is_input_backward(pass.kind) && pass.stage + 1 < t_.stages) {
        depend(consumer, pass, backward_op_[key(pass.microbatch, pass.stage + 1)],
               TransferKind::Gradient, work(pass).message_bytes);
      }
    }
  }
  if (options_.runtime == Runtime::PyTorch) pytorch_order();
}

// PyTorch's runtime (_PipelineScheduleRuntime) runs each rank's list of compute and
// communication actions: the table's own (a compute+comms file) or the one PyTorch's lowering
// gives it (pytorch_send_recv). A send or receive is posted where it stands in the list, so
// its transfer starts no earlier than the end of the compute op before it on that rank (the
// NCCL stream waits for the compute stream when the operation is enqueued). Sends are not
// waited by the compute stream; a receive is waited by the op that consumes it (the
// transfer's edge to its consumer). All transfers between one pair of ranks share one NCCL
// communicator and stream (ProcessGroupNCCL keys point-to-point communicators by the pair),
// so on each rank they run one at a time in list order: a receive posted early holds up the
// sends behind it (PyTorch issue #172668). NCCL's point-to-point semantics decide when a
// transfer moves: a message within NCCL's buffer (NCCL_BUFFSIZE) leaves as soon as its send
// is posted, and its receive completes once it has arrived and the receiver's stream reaches
// it; a larger one moves only once both its send and its receive are posted. check_p2p walks
// the same rules first, so an order that cannot complete is reported in the file's terms.
void Lowering::pytorch_order() {
  const bool own = !t_.comms.empty();
  CommOrder derived;
  if (!own && known_order_ == nullptr) derived = pytorch_send_recv(t_);
  const CommOrder& order = own ? t_.comms : known_order_ ? known_order_->order : derived;
  SendSizes sizes;
  sizes.buffer_bytes = options_.nccl.buffsize;
  sizes.bytes = [this](const CommAction& c) {
    const auto transfer = c.kind == CommKind::SendF ? activation_in_[key(c.microbatch, c.stage + 1)]
                                                    : gradient_in_[key(c.microbatch, c.stage - 1)];
    return transfer < 0 ? 0.0 : transfer_bytes(transfer);
  };
  // The check's verdict depends on the sends' sizes only through which exceed the buffer:
  // where all or none do, a known order carries it.
  std::optional<CommIssue> issue;
  bool checked = false;
  if (!own && known_order_ != nullptr) {
    std::int64_t sends = 0, large = 0;
    for (const auto& c : order.actions) {
      if (c.kind != CommKind::SendF && c.kind != CommKind::SendB) continue;
      ++sends;
      large += sizes.bytes(c) > sizes.buffer_bytes;
    }
    if (large == 0 || large == sends) {
      issue = large == 0 ? known_order_->all_eager : known_order_->all_rendezvous;
      checked = true;
    }
  }
  if (!checked) issue = check_p2p(t_, order, sizes, own);
  if (issue) {
    const bool too_large = issue->message.find("larger than NCCL's") != std::string::npos;
    throw ParamError(fmt::format(
        "{}{}{}", issue->message,
        too_large ? "; messages within NCCL's buffer (--nccl-buffsize) would not wait" : "",
        t_.comms.empty() ? " (pipetab show ... --format pytorch-comms writes these lists)" : ""));
  }
  std::unordered_map<std::int32_t, PairStream> on_pair;
  for (std::int32_t d = 0; d < t_.devices; ++d) {
    on_pair.clear();
    std::int32_t last_compute = -1;
    for (const auto& item : merged_row(t_, order, d)) {
      if (item.comm) {
        post(d, order.actions[static_cast<std::size_t>(item.index)], last_compute, on_pair);
      } else {
        last_compute = static_cast<std::int32_t>(item.index);
      }
    }
  }
}

double Lowering::transfer_bytes(std::int32_t transfer) const {
  return g_.bytes[static_cast<std::size_t>(transfer - g_.compute_nodes)];
}
bool Lowering::eager(std::int32_t transfer) const {
  return transfer_bytes(transfer) <= options_.nccl.buffsize;
}

void Lowering::post(std::int32_t device, const CommAction& c, std::int32_t last_compute,
                    std::unordered_map<std::int32_t, PairStream>& on_pair) {
  if (c.kind == CommKind::ReduceGrad) {
    reduce_after(device, c.stage) = last_compute;
    return;
  }
  // UNSHARD and RESHARD place FSDP's gathers (fsdp_unshard_roles), not transfers of their own.
  if (!has_microbatch(c.kind)) return;
  std::int32_t transfer = -1, consumer = -1;
  switch (c.kind) {
    case CommKind::SendF:
      transfer = activation_in_[key(c.microbatch, c.stage + 1)];
      break;
    case CommKind::RecvF:
      transfer = activation_in_[key(c.microbatch, c.stage)];
      consumer = forward_op_[key(c.microbatch, c.stage)];
      break;
    case CommKind::SendB:
      transfer = gradient_in_[key(c.microbatch, c.stage - 1)];
      break;
    case CommKind::RecvB:
      transfer = gradient_in_[key(c.microbatch, c.stage)];
      consumer = backward_op_[key(c.microbatch, c.stage)];
      break;
    default:
      break;
  }
  if (transfer < 0) return;  // check_comm_order rejects such actions
  const auto t = static_cast<std::size_t>(transfer - g_.compute_nodes);
  const auto peer =
      is_send(c.kind) ? g_.receiver[t] : g_.device[static_cast<std::size_t>(transfer)];
  auto& stream = on_pair[peer];
  if (is_receive(c.kind) && eager(transfer)) {
    // The message left when its send was posted; the receive completes once it has arrived
    // and this rank's stream has reached it, which is when its consumer may start.
    for (const auto before : {stream.last, stream.eager_receive}) {
      if (before >= 0 && consumer >= 0) edge(before, consumer);
    }
    stream.eager_receive = transfer;
    return;
  }
  if (last_compute >= 0) edge(last_compute, transfer);
  for (const auto before : {stream.last, stream.eager_receive}) {
    if (before >= 0) edge(before, transfer);
  }
  stream = {transfer, -1};
}

}  // namespace pipetab::detail
