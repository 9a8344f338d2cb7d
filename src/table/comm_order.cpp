#include "pipetab/table/comm_order.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <optional>
#include <queue>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/table/schedule_table.hpp"

namespace pipetab {
namespace {

constexpr std::array<std::string_view, 7> kNames = {"SEND_F",  "RECV_F",  "SEND_B",     "RECV_B",
                                                    "UNSHARD", "RESHARD", "REDUCE_GRAD"};

// Where every pass of a table runs: its device and its index in that device's row, per
// (microbatch, stage) for forwards and for the input-gradient backward (B or I).
struct PassPositions {
  std::size_t stages = 0;
  std::vector<std::int64_t> forward, backward;  // row index, -1 if absent

  explicit PassPositions(const ScheduleTable& t)
      : stages(static_cast<std::size_t>(t.stages)),
        forward(static_cast<std::size_t>(t.microbatches) * stages, -1),
        backward(forward.size(), -1) {
    for (std::int32_t d = 0; d < t.devices; ++d) {
      const auto begin = t.row_begin[static_cast<std::size_t>(d)];
      for (auto i = begin; i < t.row_begin[static_cast<std::size_t>(d) + 1]; ++i) {
        for (const Pass& pass : t.ops[static_cast<std::size_t>(i)].passes()) {
          if (pass.kind == PassKind::F) forward[key(pass.microbatch, pass.stage)] = i - begin;
          if (is_input_backward(pass.kind)) backward[key(pass.microbatch, pass.stage)] = i - begin;
        }
      }
    }
  }
  std::size_t key(std::int32_t microbatch, int stage) const {
    return static_cast<std::size_t>(microbatch) * stages + static_cast<std::size_t>(stage);
  }
};

std::int32_t device_of(const ScheduleTable& t, std::int32_t microbatch, int stage) {
  return t.placement.device_of(t.pipeline_of_microbatch(microbatch), stage);
}

}  // namespace

std::string_view to_string(CommKind kind) noexcept {
  return kNames[static_cast<std::size_t>(kind)];
}

std::optional<CommKind> parse_comm_kind(std::string_view text) noexcept {
  for (std::size_t k = 0; k < kNames.size(); ++k) {
    if (text == kNames[k]) return static_cast<CommKind>(k);
  }
  return std::nullopt;
}

std::string to_string(const CommAction& action) {
  return has_microbatch(action.kind)
             ? fmt::format("{}{}{}", action.stage, to_string(action.kind), action.microbatch)
             : fmt::format("{}{}", action.stage, to_string(action.kind));
}

CommOrder pytorch_send_recv(const ScheduleTable& t, bool idle_slots) {
  const auto N = static_cast<std::size_t>(t.stages);
  const auto D = static_cast<std::size_t>(t.devices);
  const auto passes_count = static_cast<std::size_t>(t.microbatches) * N;
  // Per (microbatch, stage): its forward / input-gradient backward has been placed.
  std::vector<std::uint8_t> forward_done(passes_count, 0), backward_done(passes_count, 0);
  const auto key = [N](const Pass& p) {
    return static_cast<std::size_t>(p.microbatch) * N + p.stage;
  };
  // The pass a pass waits for, as an index into forward_done (even) or backward_done (odd), or
  // nothing when its input is always there (first stage, last stage, W).
  const auto input_of = [&](const Pass& p) -> std::optional<std::size_t> {
    if (p.kind == PassKind::F && p.stage > 0) return 2 * (key(p) - 1);
    if (is_input_backward(p.kind) && static_cast<std::size_t>(p.stage) + 1 < N)
      return 2 * (key(p) + 1) + 1;
    return std::nullopt;
  };
  const auto done = [&](std::size_t input) {
    return (input % 2 == 0 ? forward_done : backward_done)[input / 2] != 0;
  };

  std::vector<std::vector<CommAction>> lists(D);
  std::vector<std::int64_t> next(D), placed(D, 0);
  // With idle slots as steps: the column each device's turn is at; an idle column is a turn.
  const bool steps = idle_slots && !t.slots.empty();
  std::vector<std::int64_t> column(D, 0);
  for (std::size_t d = 0; d < D; ++d)
    next[d] = t.row_begin[d];
  const auto post = [&](std::size_t from, CommKind send, int send_stage, std::int32_t to,
                        CommKind receive, int receive_stage, std::int32_t microbatch) {
    lists[from].push_back({microbatch, static_cast<std::uint16_t>(send_stage), send,
                           static_cast<std::int32_t>(placed[from])});
    const auto peer = static_cast<std::size_t>(to);
    lists[peer].push_back({microbatch, static_cast<std::uint16_t>(receive_stage), receive,
                           static_cast<std::int32_t>(placed[peer])});
  };

  // PyTorch's loop gives every remaining rank one turn per round, in rank order, and a rank's
  // op sees what ranks before it placed in the same round. A rank whose op waits for an input
  // only acts once that input is placed, so instead of visiting it every round (S rounds of S
  // ranks when one microbatch crosses S devices: quadratic) it sleeps on that input: woken by
  // a lower rank, it still acts in this round; by a higher one, in the next. The same turns,
  // in time linear in the actions (times log S for the round's order).
  using Round = std::priority_queue<std::int32_t, std::vector<std::int32_t>, std::greater<>>;
  Round now, later;
  std::vector<std::int32_t> sleeper(2 * passes_count, -1), next_sleeper(D, -1);
  for (std::size_t d = 0; d < D; ++d) {
    if (next[d] < t.row_begin[d + 1]) later.push(static_cast<std::int32_t>(d));
  }
  std::int32_t current = -1;  // the rank whose turn it is in this round
  const auto wake = [&](std::size_t input) {
    for (auto d = std::exchange(sleeper[input], -1); d >= 0;
         d = std::exchange(next_sleeper[static_cast<std::size_t>(d)], -1))
      (d > current ? now : later).push(d);
  };
  std::int64_t remaining = t.row_begin[D] - t.row_begin[0];
  while (!later.empty()) {
    std::swap(now, later);
    while (!now.empty()) {
      const std::int32_t device = current = now.top();
      now.pop();
      const auto d = static_cast<std::size_t>(device);
      const Op& op = t.ops[static_cast<std::size_t>(next[d])];
      const auto passes = op.passes();
      if (steps && column[d] < t.slots[static_cast<std::size_t>(next[d])]) {
        ++column[d];  // an idle cell takes the turn
        later.push(device);
        continue;
      }
      std::optional<std::size_t> missing;
      for (const Pass& p : passes) {
        const auto input = input_of(p);
        if (input && !done(*input)) {
          missing = input;
          break;
        }
      }
      if (missing) {  // sleeps until that input is placed
        next_sleeper[d] = std::exchange(sleeper[*missing], device);
        continue;
      }
      ++column[d];
      ++placed[d];
      ++next[d];
      --remaining;
      for (const Pass& p : passes) {
        if (p.kind == PassKind::F) {
          forward_done[key(p)] = 1;
          if (static_cast<std::size_t>(p.stage) + 1 < N) {
            const auto to = device_of(t, p.microbatch, p.stage + 1);
            if (to != device)
              post(d, CommKind::SendF, p.stage, to, CommKind::RecvF, p.stage + 1, p.microbatch);
          }
          wake(2 * key(p));
        } else if (is_input_backward(p.kind)) {
          backward_done[key(p)] = 1;
          if (p.stage > 0) {
            const auto to = device_of(t, p.microbatch, p.stage - 1);
            if (to != device)
              post(d, CommKind::SendB, p.stage, to, CommKind::RecvB, p.stage - 1, p.microbatch);
          }
          wake(2 * key(p) + 1);
        }
      }
      if (next[d] < t.row_begin[d + 1]) later.push(device);
    }
    current = -1;
  }
  if (remaining > 0) {
    std::size_t d = 0;
    while (next[d] == t.row_begin[d + 1])
      ++d;
    throw Error(
        fmt::format("cannot place sends and receives: no device's next op has its input "
                    "(device {} waits at {}); the table is not valid",
                    d, to_string(t.ops[static_cast<std::size_t>(next[d])])));
  }
  CommOrder order;
  for (auto& list : lists) {
    order.actions.insert(order.actions.end(), list.begin(), list.end());
    order.row_begin.push_back(static_cast<std::int64_t>(order.actions.size()));
  }
  if (order.actions.empty()) order.row_begin = {0};
  return order;
}

namespace {

// FSDP's actions as PyTorch's runtime asserts them (torch.distributed.pipelining.schedules,
// _PipelineScheduleRuntime._step_microbatches): a stage whose list has UNSHARD or RESHARD is an
// FSDP stage; it starts sharded, UNSHARD gathers it ("Unsharding the same stage_idx twice" if it
// already is), RESHARD frees it ("Resharding stage_idx without unsharding" if it is not), and every
// compute action on it needs it gathered ("Attempted to compute on sharded stage_idx").
std::optional<CommIssue> check_unshard_order(const ScheduleTable& t) {
  const auto stages = static_cast<std::size_t>(t.stages);
  for (std::int32_t d = 0; d < t.devices; ++d) {
    const auto row = t.comms.row(d);
    std::vector<std::uint8_t> fsdp(stages, 0), gathered(stages, 0);
    for (const CommAction& c : row) {
      if (c.kind == CommKind::Unshard || c.kind == CommKind::Reshard) fsdp[c.stage] = 1;
    }
    if (std::find(fsdp.begin(), fsdp.end(), 1) == fsdp.end()) continue;
    const auto begin = t.row_begin[static_cast<std::size_t>(d)];
    const auto ops = t.row_begin[static_cast<std::size_t>(d) + 1] - begin;
    std::size_t a = 0;
    for (std::int64_t i = 0; i <= ops; ++i) {
      for (; a < row.size() && row[a].before <= i; ++a) {
        const CommAction& c = row[a];
        if (c.kind != CommKind::Unshard && c.kind != CommKind::Reshard) continue;
        const bool unshard = c.kind == CommKind::Unshard;
        if (gathered[c.stage] == (unshard ? 1 : 0)) {
          return CommIssue{
              d, t.comms.row_begin[static_cast<std::size_t>(d)] + static_cast<std::int64_t>(a),
              fmt::format("{} on device {}: stage {} is {} (PyTorch's runtime asserts: {})",
                          to_string(c), d, c.stage, unshard ? "already unsharded" : "not unsharded",
                          unshard ? "\"Unsharding the same stage_idx twice\""
                                  : "\"Resharding stage_idx without unsharding\"")};
        }
        gathered[c.stage] = unshard ? 1 : 0;
      }
      if (i == ops) break;
      const Op& op = t.ops[static_cast<std::size_t>(begin + i)];
      for (const Pass& pass : op.passes()) {
        if (pass.kind == PassKind::None) continue;
        const auto s = static_cast<std::size_t>(pass.stage);
        if (fsdp[s] && !gathered[s]) {
          return CommIssue{
              d, -1,
              fmt::format("{} on device {} computes on stage {} while it is sharded: an "
                          "{}UNSHARD must come before it (PyTorch raises \"Attempted to compute "
                          "on sharded stage_idx={}\")",
                          to_string(op), d, pass.stage, pass.stage, pass.stage)};
        }
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<CommIssue> check_comm_order(const ScheduleTable& t) {
  if (t.comms.empty()) return std::nullopt;
  if (t.comms.row_begin.size() != static_cast<std::size_t>(t.devices) + 1) {
    return CommIssue{0, -1,
                     fmt::format("the communication order has {} rows for {} devices",
                                 t.comms.row_begin.size() - 1, t.devices)};
  }
  const PassPositions at(t);
  const auto N = static_cast<std::int64_t>(t.stages);
  // Per (microbatch, stage) and kind: the device and position of its send / receive, -1 if none.
  std::array<std::vector<std::int64_t>, 4> seen;
  for (auto& s : seen)
    s.assign(at.forward.size(), -1);
  for (std::int32_t d = 0; d < t.devices; ++d) {
    const auto row = t.comms.row(d);
    const auto ops =
        t.row_begin[static_cast<std::size_t>(d) + 1] - t.row_begin[static_cast<std::size_t>(d)];
    for (std::size_t a = 0; a < row.size(); ++a) {
      const CommAction& c = row[a];
      const auto issue = [&](std::string message) {
        return CommIssue{
            d, t.comms.row_begin[static_cast<std::size_t>(d)] + static_cast<std::int64_t>(a),
            fmt::format("{} on device {}: {}", to_string(c), d, message)};
      };
      if (c.before < 0 || c.before > ops || (a > 0 && c.before < row[a - 1].before))
        return issue("its position is outside the device's list");
      if (c.stage >= N) {
        return issue(
            fmt::format("stage {} does not exist (the table has stages 0..{})", c.stage, N - 1));
      }
      if (!has_microbatch(c.kind)) {
        bool here = false;
        for (std::int32_t p = 0; p < t.pipelines() && !here; ++p)
          here = t.placement.device_of(p, c.stage) == d;
        if (!here) return issue(fmt::format("stage {} does not run on this device", c.stage));
        continue;
      }
      if (c.microbatch < 0 || c.microbatch >= t.microbatches) {
        return issue(fmt::format("microbatch {} does not exist (the table has microbatches 0..{})",
                                 c.microbatch, t.microbatches - 1));
      }
      if (device_of(t, c.microbatch, c.stage) != d) {
        return issue(fmt::format("stage {} of microbatch {} runs on device {}", c.stage,
                                 c.microbatch, device_of(t, c.microbatch, c.stage)));
      }
      // The stage on the other end and the pass on this end the action belongs to.
      const bool forward = c.kind == CommKind::SendF || c.kind == CommKind::RecvF;
      const int peer_stage =
          c.kind == CommKind::SendF || c.kind == CommKind::RecvB ? c.stage + 1 : c.stage - 1;
      if (peer_stage < 0 || peer_stage >= N) {
        return issue(fmt::format("stage {} is the {} stage: {} no other stage", c.stage,
                                 peer_stage < 0 ? "first" : "last",
                                 is_send(c.kind) ? "it sends to" : "it receives from"));
      }
      const auto peer = device_of(t, c.microbatch, peer_stage);
      if (peer == d) {
        return issue(
            fmt::format("stages {} and {} of microbatch {} both run on this device, so "
                        "nothing is sent (PyTorch hands the tensor over directly)",
                        c.stage, peer_stage, c.microbatch));
      }
      const auto k = at.key(c.microbatch, c.stage);
      const auto local = forward ? at.forward[k] : at.backward[k];
      if (local < 0) {
        return issue(fmt::format("there is no {} of stage {} microbatch {} in the table",
                                 forward ? "forward" : "input-gradient backward", c.stage,
                                 c.microbatch));
      }
      const auto local_name = to_string(
          t.ops[static_cast<std::size_t>(t.row_begin[static_cast<std::size_t>(d)] + local)]);
      auto& slot = seen[static_cast<std::size_t>(c.kind)][k];
      if (slot >= 0) return issue("it appears twice");
      slot = static_cast<std::int64_t>(a);
      if (is_send(c.kind) && c.before <= local) {
        return issue(
            fmt::format("it comes before {}, whose output it sends; a send follows its "
                        "producer",
                        local_name));
      }
      if (is_receive(c.kind) && c.before > local) {
        return issue(
            fmt::format("it comes after {}, which consumes it; a receive precedes its "
                        "consumer",
                        local_name));
      }
    }
  }
  if (auto issue = check_unshard_order(t)) return issue;
  // Every cross-device dependency has both ends.
  for (std::int32_t m = 0; m < t.microbatches; ++m) {
    for (std::int64_t s = 0; s + 1 < N; ++s) {
      const auto from = device_of(t, m, static_cast<int>(s));
      const auto to = device_of(t, m, static_cast<int>(s) + 1);
      if (from == to) continue;
      const auto k = at.key(m, static_cast<int>(s));
      const auto k1 = at.key(m, static_cast<int>(s) + 1);
      const auto missing = [&](std::int32_t device, CommAction c, const std::string& why) {
        return CommIssue{device, -1,
                         fmt::format("device {} has no {}: {}", device, to_string(c), why)};
      };
      const auto su = static_cast<std::uint16_t>(s);
      const auto su1 = static_cast<std::uint16_t>(s + 1);
      if (seen[static_cast<std::size_t>(CommKind::SendF)][k] < 0)
        return missing(from, {m, su, CommKind::SendF, 0},
                       fmt::format("stage {} runs on device {}", s + 1, to));
      if (seen[static_cast<std::size_t>(CommKind::RecvF)][k1] < 0)
        return missing(to, {m, su1, CommKind::RecvF, 0},
                       fmt::format("stage {} runs on device {}", s, from));
      if (at.backward[k] < 0 || at.backward[k1] < 0) {
        // No backward crosses this boundary (a forward-only pair): a backward send or receive
        // listed for it has no other end, and would wait for ever.
        const auto listed = [&](CommKind kind, std::size_t at_key, std::int32_t device,
                                std::int64_t other, std::int32_t other_device) {
          const auto a = seen[static_cast<std::size_t>(kind)][at_key];
          if (a < 0) return std::optional<CommIssue>{};
          return std::optional<CommIssue>{CommIssue{
              device, t.comms.row_begin[static_cast<std::size_t>(device)] + a,
              fmt::format("{} on device {}: stage {} of microbatch {} has no input-gradient "
                          "backward (device {}), so nothing {} it",
                          to_string(t.comms.row(device)[static_cast<std::size_t>(a)]), device,
                          other, m, other_device, kind == CommKind::RecvB ? "sends" : "receives")}};
        };
        if (auto issue = listed(CommKind::RecvB, k, from, s + 1, to)) return issue;
        if (auto issue = listed(CommKind::SendB, k1, to, s, from)) return issue;
        continue;
      }
      if (seen[static_cast<std::size_t>(CommKind::SendB)][k1] < 0)
        return missing(to, {m, su1, CommKind::SendB, 0},
                       fmt::format("stage {} runs on device {}", s, from));
      if (seen[static_cast<std::size_t>(CommKind::RecvB)][k] < 0)
        return missing(from, {m, su, CommKind::RecvB, 0},
                       fmt::format("stage {} runs on device {}", s + 1, to));
    }
  }
  return std::nullopt;
}

namespace {

// One rank's list as the point-to-point check walks it: the position (0-based, as the file
// counts its cells) of every compute op and every action.
struct RankList {
  std::int64_t size = 0;
  std::vector<std::int64_t> op_at, action_at;  // by row index
};

// The transfers between a pair of ranks, as one rank's list posts them: its NCCL stream.
struct Chain {
  std::int32_t rank = 0, peer = 0;
  std::vector<std::int64_t> actions;  // global action indices, in list order
  std::size_t head = 0;               // actions before it have completed
};

class P2PCheck {
 public:
  P2PCheck(const ScheduleTable& t, const CommOrder& order, const SendSizes& sizes, bool file_lines)
      : t_(t), order_(order), sizes_(sizes), file_lines_(file_lines) {}

  std::optional<CommIssue> run() {
    build();
    if (auto issue = crossing()) return issue;
    return deadlock();
  }

 private:
  std::size_t key(std::int32_t microbatch, int stage) const {
    return static_cast<std::size_t>(microbatch) * static_cast<std::size_t>(t_.stages) +
           static_cast<std::size_t>(stage);
  }
  // A transfer: the forward (0) or backward (1) output of (microbatch, sending stage).
  std::size_t transfer_key(const CommAction& c) const {
    const bool forward = c.kind == CommKind::SendF || c.kind == CommKind::RecvF;
    const int sender = is_send(c.kind) ? c.stage : forward ? c.stage - 1 : c.stage + 1;
    return 2 * key(c.microbatch, sender) + (forward ? 0 : 1);
  }
  std::int32_t peer_of(const CommAction& c) const {
    const bool up = c.kind == CommKind::SendF || c.kind == CommKind::RecvB;
    return device_of(t_, c.microbatch, up ? c.stage + 1 : c.stage - 1);
  }

  void build() {
    const auto D = static_cast<std::size_t>(t_.devices);
    lists_.resize(D);
    rank_of_.assign(order_.actions.size(), 0);
    chain_of_.assign(order_.actions.size(), -1);
    transfer_of_.assign(order_.actions.size(), -1);
    slot_.assign(
        2 * static_cast<std::size_t>(t_.microbatches) * static_cast<std::size_t>(t_.stages), -1);
    for (std::size_t d = 0; d < D; ++d) {
      auto& list = lists_[d];
      const auto ops = t_.row_begin[d + 1] - t_.row_begin[d];
      list.op_at.resize(static_cast<std::size_t>(ops));
      const auto row = order_.row(static_cast<int>(d));
      list.action_at.resize(row.size());
      const auto first = order_.empty() ? std::int64_t{0} : order_.row_begin[d];
      std::unordered_map<std::int32_t, std::int32_t> chain_to;
      for (const auto& item : merged_row(t_, order_, static_cast<int>(d))) {
        const auto at = list.size++;
        if (!item.comm) {
          list.op_at[static_cast<std::size_t>(item.index - t_.row_begin[d])] = at;
          continue;
        }
        const auto a = static_cast<std::size_t>(item.index);
        list.action_at[static_cast<std::size_t>(item.index - first)] = at;
        rank_of_[a] = static_cast<std::int32_t>(d);
        const CommAction& c = order_.actions[a];
        if (!has_microbatch(c.kind)) continue;
        const auto peer = peer_of(c);
        auto [it, fresh] = chain_to.try_emplace(peer, static_cast<std::int32_t>(chains_.size()));
        if (fresh) chains_.push_back({static_cast<std::int32_t>(d), peer, {}, 0});
        chain_of_[a] = it->second;
        chains_[static_cast<std::size_t>(it->second)].actions.push_back(
            static_cast<std::int64_t>(a));
        auto& slot = slot_[transfer_key(c)];
        if (slot < 0) {
          slot = static_cast<std::int64_t>(transfers_.size());
          transfers_.push_back({});
        }
        auto& tr = transfers_[static_cast<std::size_t>(slot)];
        (is_send(c.kind) ? tr.send : tr.receive) = static_cast<std::int64_t>(a);
        transfer_of_[a] = slot;
      }
    }
    for (auto& tr : transfers_) {
      if (tr.send < 0) continue;
      const CommAction& c = order_.actions[static_cast<std::size_t>(tr.send)];
      tr.bytes = sizes_.bytes ? sizes_.bytes(c) : 0.0;
      tr.eager = tr.bytes <= sizes_.buffer_bytes;
    }
  }

  // "1RECV_F1 (line 2, action 1 of 8)": an action or op where the file has it.
  std::string where(std::int32_t rank, std::int64_t at) const {
    const auto& list = lists_[static_cast<std::size_t>(rank)];
    if (file_lines_) return fmt::format("line {}, action {} of {}", rank + 1, at + 1, list.size);
    return fmt::format("rank {}, action {} of {} of its list as PyTorch's lowering orders it", rank,
                       at + 1, list.size);
  }
  std::string action(std::int64_t a) const {
    const auto rank = rank_of_[static_cast<std::size_t>(a)];
    const auto first = order_.row_begin[static_cast<std::size_t>(rank)];
    const auto at =
        lists_[static_cast<std::size_t>(rank)].action_at[static_cast<std::size_t>(a - first)];
    return fmt::format("{} ({})", to_string(order_.actions[static_cast<std::size_t>(a)]),
                       where(rank, at));
  }
  std::string op(std::int32_t rank, std::int64_t row_index) const {
    const auto at =
        lists_[static_cast<std::size_t>(rank)].op_at[static_cast<std::size_t>(row_index)];
    return fmt::format("{} ({})",
                       to_string(t_.ops[static_cast<std::size_t>(
                           t_.row_begin[static_cast<std::size_t>(rank)] + row_index)]),
                       where(rank, at));
  }
  static std::string bytes_text(double bytes) {
    if (bytes < 1024.0) return fmt::format("{:.3g} B", bytes);
    if (bytes < 1048576.0) return fmt::format("{:.3g} KiB", bytes / 1024.0);
    return fmt::format("{:.3g} MiB", bytes / 1048576.0);
  }
  static std::string ordinal(std::size_t n) {
    const auto mod100 = n % 100;
    const char* suffix = mod100 >= 11 && mod100 <= 13 ? "th"
                         : n % 10 == 1                ? "st"
                         : n % 10 == 2                ? "nd"
                         : n % 10 == 3                ? "rd"
                                                      : "th";
    return fmt::format("{}{}", n, suffix);
  }
  CommIssue issue(std::int64_t a, std::string message) const {
    return {rank_of_[static_cast<std::size_t>(a)], a, std::move(message)};
  }

  // NCCL matches the sends from rank a to rank b with b's receives from a in the order each
  // rank posts them.
  std::optional<CommIssue> crossing() const {
    std::vector<std::int64_t> sends, receives;
    for (const Chain& out : chains_) {
      sends.clear();
      for (const auto a : out.actions)
        if (is_send(order_.actions[static_cast<std::size_t>(a)].kind)) sends.push_back(a);
      receives.clear();
      for (const Chain& in : chains_) {
        if (in.rank != out.peer || in.peer != out.rank) continue;
        for (const auto a : in.actions)
          if (is_receive(order_.actions[static_cast<std::size_t>(a)].kind)) receives.push_back(a);
      }
      for (std::size_t k = 0; k < std::min(sends.size(), receives.size()); ++k) {
        const auto send = sends[k], receive = receives[k];
        if (transfer_of_[static_cast<std::size_t>(send)] ==
            transfer_of_[static_cast<std::size_t>(receive)])
          continue;
        const auto& r = order_.actions[static_cast<std::size_t>(receive)];
        const auto& s = order_.actions[static_cast<std::size_t>(send)];
        const auto& own =
            transfers_[static_cast<std::size_t>(transfer_of_[static_cast<std::size_t>(send)])];
        const bool forward = s.kind == CommKind::SendF;
        return issue(
            receive,
            fmt::format("the transfers between ranks {} and {} cross: {} is rank {}'s {} receive "
                        "from rank {}, and rank {}'s {} send to rank {} is {}; NCCL matches the "
                        "sends and receives between two ranks in the order they are posted, so "
                        "{} would get microbatch {}'s {} of stage {} (wrong data, or a hang if the "
                        "sizes differ): post {} there",
                        out.rank, out.peer, action(receive), out.peer, ordinal(k + 1), out.rank,
                        out.rank, ordinal(k + 1), out.peer, action(send), to_string(r),
                        s.microbatch, forward ? "activations" : "gradient", s.stage,
                        own.receive >= 0
                            ? to_string(order_.actions[static_cast<std::size_t>(own.receive)])
                            : std::string("its receive")));
      }
    }
    return std::nullopt;
  }

  // Whether the receive feeding pass `p` on `rank` has completed (true for a local input).
  std::optional<std::int64_t> pending_input(std::int32_t rank, const Pass& p) const {
    CommAction need{p.microbatch, p.stage, CommKind::RecvF, 0};
    if (p.kind == PassKind::F && p.stage > 0) {
      if (device_of(t_, p.microbatch, p.stage - 1) == rank) return std::nullopt;
    } else if (is_input_backward(p.kind) && p.stage + 1 < t_.stages) {
      if (device_of(t_, p.microbatch, p.stage + 1) == rank) return std::nullopt;
      need.kind = CommKind::RecvB;
    } else {
      return std::nullopt;
    }
    const auto slot = slot_[transfer_key(need)];
    if (slot < 0) return std::nullopt;  // check_comm_order reports a missing receive
    const auto& tr = transfers_[static_cast<std::size_t>(slot)];
    if (tr.received || tr.receive < 0) return std::nullopt;
    return tr.receive;
  }

  // The chain position of action `a` has been reached (every earlier one completed).
  bool at_head(std::int64_t a) const {
    const auto& chain = chains_[static_cast<std::size_t>(chain_of_[static_cast<std::size_t>(a)])];
    return chain.head < chain.actions.size() && chain.actions[chain.head] == a;
  }
  // The compute ops before action `a` on its rank have run.
  bool posted(std::int64_t a) const {
    return done_[static_cast<std::size_t>(rank_of_[static_cast<std::size_t>(a)])] >=
           order_.actions[static_cast<std::size_t>(a)].before;
  }

  std::optional<CommIssue> deadlock() {
    const auto D = static_cast<std::size_t>(t_.devices);
    done_.assign(D, 0);
    std::vector<std::vector<std::size_t>> chains_of(D);
    for (std::size_t c = 0; c < chains_.size(); ++c)
      chains_of[static_cast<std::size_t>(chains_[c].rank)].push_back(c);
    // What a rank can do depends on itself and on the ranks its chains talk to: a worklist of
    // ranks to revisit, each revisited after it or a peer moved. (Sweeping every rank until
    // nothing moved took a sweep per hop of each gradient's way back: O(M·D²) for 1F1B, the
    // better part of `plan`'s time at 16,384 GPUs.)
    std::vector<std::vector<std::int32_t>> peers(D);
    const auto link = [&](std::int32_t a, std::int32_t b) {
      if (b < 0 || static_cast<std::size_t>(b) >= D) return;
      auto& list = peers[static_cast<std::size_t>(a)];
      if (std::find(list.begin(), list.end(), b) == list.end()) list.push_back(b);
    };
    for (const auto& chain : chains_) {  // both ways: a send waits on its receive and back
      link(chain.rank, chain.peer);
      link(chain.peer, chain.rank);
    }
    std::vector<std::uint8_t> queued(D, 1);
    std::vector<std::size_t> work(D);
    for (std::size_t d = 0; d < D; ++d)
      work[d] = D - 1 - d;  // rank 0 first
    while (!work.empty()) {
      const std::size_t d = work.back();
      work.pop_back();
      queued[d] = 0;
      bool progress = false;
      {
        const auto rank = static_cast<std::int32_t>(d);
        const auto ops = t_.row_begin[d + 1] - t_.row_begin[d];
        while (done_[d] < ops) {
          const Op& o = t_.ops[static_cast<std::size_t>(t_.row_begin[d] + done_[d])];
          bool ready = true;
          for (const Pass& p : o.passes())
            ready = ready && !pending_input(rank, p);
          if (!ready) break;
          ++done_[d];
          progress = true;
        }
        for (const auto c : chains_of[d]) {
          Chain& chain = chains_[c];
          while (chain.head < chain.actions.size()) {
            const auto a = chain.actions[chain.head];
            auto& tr =
                transfers_[static_cast<std::size_t>(transfer_of_[static_cast<std::size_t>(a)])];
            if (is_send(order_.actions[static_cast<std::size_t>(a)].kind)) {
              // A send starts once posted; one larger than the buffer completes only when its
              // receive is posted too.
              if (!posted(a)) break;
              if (!tr.eager && (tr.receive < 0 || !at_head(tr.receive) || !posted(tr.receive)))
                break;
              tr.sent = true;
            } else {
              if (!tr.sent) break;
              tr.received = true;
            }
            ++chain.head;
            progress = true;
          }
        }
      }
      if (!progress) continue;
      const auto revisit = [&](std::size_t r) {
        if (queued[r] == 0) {
          queued[r] = 1;
          work.push_back(r);
        }
      };
      revisit(d);
      for (const auto peer : peers[d])
        revisit(static_cast<std::size_t>(peer));
    }
    std::string stuck;
    std::int64_t first = -1, ranks = 0;
    std::int32_t first_rank = 0;
    for (std::size_t d = 0; d < D; ++d) {
      const auto rank = static_cast<std::int32_t>(d);
      const auto ops = t_.row_begin[d + 1] - t_.row_begin[d];
      // The earliest item of the list that has not completed.
      std::int64_t at = lists_[d].size, action_index = -1;
      if (done_[d] < ops) at = lists_[d].op_at[static_cast<std::size_t>(done_[d])];
      for (const auto c : chains_of[d]) {
        const Chain& chain = chains_[c];
        if (chain.head == chain.actions.size()) continue;
        const auto a = chain.actions[chain.head];
        const auto a_at = lists_[d].action_at[static_cast<std::size_t>(a - order_.row_begin[d])];
        if (a_at < at) {
          at = a_at;
          action_index = a;
        }
      }
      if (at == lists_[d].size) continue;
      ++ranks;
      if (ranks > 4) continue;
      std::string why;
      if (action_index < 0) {
        const Op& o = t_.ops[static_cast<std::size_t>(t_.row_begin[d] + done_[d])];
        std::int64_t receive = -1;
        for (const Pass& p : o.passes()) {
          if (const auto r = pending_input(rank, p)) {
            receive = *r;
            break;
          }
        }
        why = fmt::format("rank {} waits at {} for its input, {}", rank, op(rank, done_[d]),
                          action(receive));
        if (first < 0) first = receive;
      } else {
        const auto& tr = transfers_[static_cast<std::size_t>(
            transfer_of_[static_cast<std::size_t>(action_index)])];
        if (is_send(order_.actions[static_cast<std::size_t>(action_index)].kind)) {
          why = fmt::format(
              "rank {} waits at {}: {}, so it completes only once its receive {} is posted", rank,
              action(action_index),
              std::isfinite(tr.bytes)
                  ? fmt::format("a send of {} is larger than NCCL's {} buffer",
                                bytes_text(tr.bytes), bytes_text(sizes_.buffer_bytes))
                  : std::string("its message is larger than NCCL's buffer"),
              action(tr.receive));
        } else {
          why = fmt::format("rank {} waits at {} for its send, {}", rank, action(action_index),
                            action(tr.send));
        }
        if (first < 0) first = action_index;
      }
      if (first_rank == 0 && stuck.empty()) first_rank = rank;
      stuck += fmt::format("{}{}", stuck.empty() ? "" : "; ", why);
    }
    if (ranks == 0) return std::nullopt;
    if (ranks > 4) stuck += fmt::format("; and {} more ranks", ranks - 4);
    return CommIssue{first_rank, first,
                     fmt::format("the ranks' lists deadlock (each waits for another): {}", stuck)};
  }

  struct Transfer {
    std::int64_t send = -1, receive = -1;
    double bytes = 0.0;
    bool eager = true, sent = false, received = false;
  };

  const ScheduleTable& t_;
  const CommOrder& order_;
  const SendSizes& sizes_;
  bool file_lines_;
  std::vector<RankList> lists_;
  std::vector<Chain> chains_;
  std::vector<Transfer> transfers_;
  std::vector<std::int32_t> rank_of_, chain_of_;
  std::vector<std::int64_t> transfer_of_, slot_, done_;
};

}  // namespace

std::optional<CommIssue> check_p2p(const ScheduleTable& table, const CommOrder& order,
                                   const SendSizes& sizes, bool file_lines) {
  if (order.empty()) return std::nullopt;
  return P2PCheck(table, order, sizes, file_lines).run();
}

std::vector<ListItem> merged_row(const ScheduleTable& t, const CommOrder& order, int device) {
  const auto begin = t.row_begin[static_cast<std::size_t>(device)];
  const auto end = t.row_begin[static_cast<std::size_t>(device) + 1];
  const auto actions = order.row(device);
  const auto first =
      order.empty() ? std::int64_t{0} : order.row_begin[static_cast<std::size_t>(device)];
  std::vector<ListItem> out;
  out.reserve(static_cast<std::size_t>(end - begin) + actions.size());
  std::size_t a = 0;
  for (auto i = begin; i <= end; ++i) {
    for (; a < actions.size() && actions[a].before <= i - begin; ++a)
      out.push_back({true, first + static_cast<std::int64_t>(a)});
    if (i < end) out.push_back({false, i});
  }
  return out;
}

std::vector<ListItem> merged_row(const ScheduleTable& t, int device) {
  return merged_row(t, t.comms, device);
}

ScheduleTable merge_split_backward(const ScheduleTable& t) {
  ScheduleTable out = t;
  out.slots.clear();
  out.comms = {};
  out.ops.clear();
  out.row_begin.assign(1, 0);
  for (std::int32_t d = 0; d < t.devices; ++d) {
    const auto row = t.row(d);
    for (std::size_t i = 0; i < row.size(); ++i) {
      const Op& op = row[i];
      if (!op.is_pair() && op.first().kind == PassKind::I && i + 1 < row.size() &&
          !row[i + 1].is_pair() && row[i + 1].first().kind == PassKind::W &&
          row[i + 1].first().stage == op.first().stage &&
          row[i + 1].first().microbatch == op.first().microbatch) {
        out.ops.push_back(Op::make(PassKind::B, op.first().microbatch, op.first().stage));
        ++i;
      } else {
        out.ops.push_back(op);
      }
    }
    out.row_begin.push_back(static_cast<std::int64_t>(out.ops.size()));
  }
  return out;
}

}  // namespace pipetab
