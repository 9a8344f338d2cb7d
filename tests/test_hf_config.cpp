// Hugging Face config.json files read as pipetab models (io/hf_config.hpp): the released configs
// of tests/data/hf/ (tests/data/hf/README.md says where each comes from) against the presets
// written independently from the papers and the same configs, every error with its line, column
// and field, and the notes on what was not used or is not modelled.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/io/hf_config.hpp"
#include "pipetab/model/workload.hpp"
#include "pipetab/sim/options.hpp"

namespace pipetab {
namespace {

namespace fs = std::filesystem;

fs::path data(const std::string& model) {
  return fs::path(PIPETAB_SOURCE_DIR) / "tests/data/hf" / model / "config.json";
}

std::string text_of(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

ModelConfig read(const std::string& model) {
  return io::parse_hf_config(text_of(data(model)), data(model).string());
}

const TransformerConfig& transformer(const ModelConfig& m) {
  return std::get<TransformerConfig>(m.spec);
}

// An edit that removes the field.
const char* const kRemoved = "(removed)";

// A released config with some fields replaced or removed, written out by nlohmann (keys sorted,
// indented by 2) and read as "c.json".
ModelConfig read_edited(const std::string& model, const nlohmann::json& edits) {
  auto doc = nlohmann::json::parse(text_of(data(model)));
  for (const auto& [key, value] : edits.items()) {
    if (value == kRemoved) {
      doc.erase(key);
    } else {
      doc[key] = value;
    }
  }
  return io::parse_hf_config(doc.dump(2), "c.json");
}

std::string error_of(const std::string& text) {
  try {
    (void)io::parse_hf_config(text, "c.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string edit_error(const std::string& model, const nlohmann::json& edits) {
  try {
    (void)read_edited(model, edits);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool notes_mention(const ModelConfig& m, const std::string& text) {
  return std::any_of(m.notes.begin(), m.notes.end(),
                     [&](const std::string& note) { return note.find(text) != std::string::npos; });
}

std::string unused_note(const ModelConfig& m) {
  for (const auto& note : m.notes) {
    if (note.find("not used by pipetab's model") != std::string::npos) return note;
  }
  return "";
}

// The architecture fields a config.json sets, one by one; the job and layout fields
// (seq_len, precision, recompute, ...) are no part of either.
void expect_same_architecture(const TransformerConfig& hf, const TransformerConfig& preset) {
  EXPECT_EQ(hf.layers, preset.layers);
  EXPECT_EQ(hf.hidden, preset.hidden);
  EXPECT_EQ(hf.heads, preset.heads);
  EXPECT_EQ(hf.kv_heads, preset.kv_heads);
  EXPECT_EQ(hf.head_dim, preset.head_dim);
  EXPECT_EQ(hf.ffn_hidden, preset.ffn_hidden);
  EXPECT_EQ(hf.vocab, preset.vocab);
  EXPECT_EQ(hf.gated_mlp, preset.gated_mlp);
  EXPECT_EQ(hf.learned_positions, preset.learned_positions);
  EXPECT_EQ(hf.rotary, preset.rotary);
  EXPECT_EQ(hf.qk_norm, preset.qk_norm);
  EXPECT_EQ(hf.dropout, preset.dropout);
  EXPECT_EQ(hf.tie_embeddings, preset.tie_embeddings);
  EXPECT_EQ(hf.mtp_layers, preset.mtp_layers);
  EXPECT_EQ(hf.attention, preset.attention);
  EXPECT_EQ(hf.latent.q_lora_rank, preset.latent.q_lora_rank);
  EXPECT_EQ(hf.latent.kv_lora_rank, preset.latent.kv_lora_rank);
  EXPECT_EQ(hf.latent.qk_rope_head_dim, preset.latent.qk_rope_head_dim);
  EXPECT_EQ(hf.latent.v_head_dim, preset.latent.v_head_dim);
  ASSERT_EQ(hf.moe.has_value(), preset.moe.has_value());
  if (hf.moe) {
    EXPECT_EQ(hf.moe->experts, preset.moe->experts);
    EXPECT_EQ(hf.moe->top_k, preset.moe->top_k);
    EXPECT_EQ(hf.moe->expert_ffn_hidden, preset.moe->expert_ffn_hidden);
    EXPECT_EQ(hf.moe->shared_experts, preset.moe->shared_experts);
    EXPECT_EQ(hf.moe->shared_expert_ffn_hidden, preset.moe->shared_expert_ffn_hidden);
    EXPECT_EQ(hf.moe->dense_layers, preset.moe->dense_layers);
    EXPECT_EQ(hf.moe->dense_ffn_hidden, preset.moe->dense_ffn_hidden);
    EXPECT_EQ(hf.moe->node_limit, preset.moe->node_limit);
    EXPECT_EQ(hf.moe->expert_bias, preset.moe->expert_bias);
    EXPECT_EQ(hf.moe->activation_clamp, preset.moe->activation_clamp);
  }
}

// Each released config against the preset of the same model, which configs/models/ wrote by hand
// from the papers, model cards and these configs: the two must agree on every architecture field.
TEST(HfConfig, ReleasedConfigsAreTheirPresets) {
  const std::pair<const char*, const char*> pairs[] = {
      {"llama-3.1-8b", "llama3.1-8b"},
      {"llama-3.1-70b", "llama3.1-70b"},
      {"qwen3-32b", "qwen3-32b"},
      {"qwen3-30b-a3b", "qwen3-30b-a3b"},
      {"qwen3-235b-a22b", "qwen3-235b-a22b"},
      {"mixtral-8x7b", "mixtral-8x7b"},
      {"deepseek-v3", "deepseek-v3"},
      {"gpt-oss-120b", "gpt-oss-120b"},
  };
  for (const auto& [folder, preset] : pairs) {
    SCOPED_TRACE(folder);
    const auto hf = read(folder);
    const auto ours = io::load_model(preset);
    expect_same_architecture(transformer(hf), transformer(ours));
    const auto hf_run = default_setup(hf, {}), our_run = default_setup(ours, {});
    EXPECT_EQ(hf_run.layout.balance_embedding, our_run.layout.balance_embedding);
    EXPECT_EQ(total_params({transformer(hf), hf_run.job, hf_run.layout}),
              total_params({transformer(ours), our_run.job, our_run.layout}));
    EXPECT_EQ(hf.name, folder);  // no _name_or_path in these files: the folder names them
    // The reader sets no job field but fused attention: the rest stay the job's defaults.
    EXPECT_EQ(hf_run.job.seq_len, 0);
    EXPECT_EQ(hf_run.job.micro_batch, 1);
    EXPECT_EQ(hf_run.job.recompute, Recompute::None);
    EXPECT_TRUE(hf_run.job.stack.flash_attention);
    EXPECT_EQ(hf_run.layout.tp, 1);
  }
}

// configs/models/llama3.1-405b.toml counts the embedding and the output layer as a layer each when
// cutting the model into stages (balance_embedding, "as Llama 3's pipeline put one layer fewer on
// its first and last stages"): a choice of pipeline split, not of the architecture, which a
// config.json does not hold. Everything else agrees.
TEST(HfConfig, Llama405bIsItsPresetButForThePipelineSplit) {
  const auto hf = read("llama-3.1-405b");
  const auto preset = io::load_model("llama3.1-405b");
  expect_same_architecture(transformer(hf), transformer(preset));
  EXPECT_FALSE(default_setup(hf, {}).layout.balance_embedding);
  EXPECT_TRUE(default_setup(preset, {}).layout.balance_embedding);
}

// configs/models/mpt-7b.toml is the model as llm-foundry's pretraining yaml builds it (its comment:
// "MosaicML MPT-7B as llm-foundry pretrains it", MPTConfig's defaults the yaml keeps), not the
// released checkpoint: the yaml's vocab_size is 50,368 and it leaves ALiBi off, so MPTConfig's
// learned_pos_emb keeps a position table; the released config.json has the tokenizer's 50,432
// rows and "alibi": true, which turns learned_pos_emb off ("alibi or rope is turned on, setting
// learned_pos_emb to False", MPTConfig). The rest agrees.
TEST(HfConfig, Mpt7bIsThePresetButForTheYamlsVocabularyAndPositions) {
  const auto hf = read("mpt-7b");
  auto m = transformer(hf);
  const auto preset = transformer(io::load_model("mpt-7b"));
  EXPECT_EQ(m.vocab, 50432);
  EXPECT_EQ(preset.vocab, 50368);
  EXPECT_FALSE(m.learned_positions);
  EXPECT_TRUE(preset.learned_positions);
  m.vocab = preset.vocab;
  m.learned_positions = preset.learned_positions;
  expect_same_architecture(m, preset);
  EXPECT_FALSE(m.gated_mlp);
  EXPECT_EQ(m.ffn_hidden, 4 * 4096);
  EXPECT_TRUE(m.tie_embeddings);
  EXPECT_FALSE(m.dropout);
  // The fields MPT's remote code reads but that change nothing pipetab models.
  const auto unused = unused_note(hf);
  for (const char* field : {"attn_config.attn_impl", "attn_config.qk_ln", "init_config",
                            "max_seq_len", "norm_type", "tokenizer_name"}) {
    EXPECT_NE(unused.find(field), std::string::npos) << field;
  }
  EXPECT_EQ(unused.find("attn_config.alibi,"), std::string::npos);
}

// Qwen2.5-7B has no preset: its values as the config states them.
TEST(HfConfig, ReadsQwen25) {
  const auto hf = read("qwen2.5-7b");
  const auto& m = transformer(hf);
  EXPECT_EQ(m.layers, 28);
  EXPECT_EQ(m.hidden, 3584);
  EXPECT_EQ(m.heads, 28);
  EXPECT_EQ(m.kv_heads, 4);
  EXPECT_EQ(m.head_dim, 0);  // 3584 / 28 = 128
  EXPECT_EQ(m.ffn_hidden, 18944);
  EXPECT_EQ(m.vocab, 152064);
  EXPECT_TRUE(m.gated_mlp);
  EXPECT_FALSE(m.learned_positions);
  EXPECT_FALSE(m.dropout);
  EXPECT_FALSE(m.tie_embeddings);
  EXPECT_FALSE(m.moe);
  EXPECT_EQ(m.attention, AttentionKind::MultiHead);
  // use_sliding_window is false: sliding_window and max_window_layers do not apply and are
  // read, not reported; Qwen2's query, key and value biases are.
  EXPECT_TRUE(notes_mention(hf, "Qwen2's query, key and value projections: biases"));
  EXPECT_FALSE(notes_mention(hf, "sliding window"));
  const auto unused = unused_note(hf);
  EXPECT_EQ(unused.find("sliding_window"), std::string::npos);
  EXPECT_NE(unused.find("use_mrope"), std::string::npos);
}

TEST(HfConfig, NotesTheFieldsItDidNotUse) {
  const auto hf = read("llama-3.1-8b");
  const auto note = unused_note(hf);
  ASSERT_FALSE(note.empty());
  EXPECT_EQ(note.find(data("llama-3.1-8b").string() + ": not used by pipetab's model: "), 0U);
  for (const char* field :
       {"bos_token_id", "eos_token_id", "initializer_range", "max_position_embeddings",
        "pretraining_tp", "rms_norm_eps", "rope_scaling", "rope_theta", "torch_dtype",
        "transformers_version", "use_cache"}) {
    EXPECT_NE(note.find(field), std::string::npos) << field;
  }
  for (const char* field : {"hidden_size", "num_key_value_heads", "vocab_size", "architectures",
                            "attention_bias", "mlp_bias", "attention_dropout"}) {
    EXPECT_EQ(note.find(field), std::string::npos) << field;
  }
  EXPECT_NE(note.find("(they do not change the work or the memory of training)"),
            std::string::npos);
  EXPECT_EQ(hf.notes.size(), 1U);  // nothing in Llama 3.1 that pipetab cannot model
  // The one job default: fused attention.
  ASSERT_EQ(hf.defaults.size(), 1U);
  EXPECT_EQ(hf.defaults[0].key, "flash_attention");
  EXPECT_EQ(hf.defaults[0].value, "true");
  EXPECT_EQ(hf.defaults[0].origin,
            data("llama-3.1-8b").string() +
                ": a Hugging Face model trains with fused attention (PyTorch SDPA, "
                "FlashAttention, Transformer Engine)");
}

TEST(HfConfig, DeepSeekV3) {
  const auto hf = read("deepseek-v3");
  const auto& m = transformer(hf);
  EXPECT_EQ(m.attention, AttentionKind::Latent);
  EXPECT_EQ(m.head_dim, 128);  // qk_nope_head_dim
  EXPECT_EQ(m.latent.q_lora_rank, 1536);
  EXPECT_EQ(m.latent.kv_lora_rank, 512);
  EXPECT_EQ(m.latent.qk_rope_head_dim, 64);
  EXPECT_EQ(m.latent.v_head_dim, 128);
  EXPECT_EQ(m.mtp_layers, 1);
  ASSERT_TRUE(m.moe);
  EXPECT_EQ(m.moe->dense_layers, 3);
  EXPECT_EQ(m.moe->dense_ffn_hidden, 18432);
  EXPECT_EQ(m.moe->node_limit, 0);
  EXPECT_TRUE(notes_mention(hf, "n_group = 8, topk_group = 4"));
  EXPECT_NE(unused_note(hf).find("quantization_config"), std::string::npos);
  EXPECT_NE(unused_note(hf).find("scoring_func"), std::string::npos);
  // V2-Lite-style uncompressed queries: q_lora_rank null.
  EXPECT_EQ(transformer(read_edited("deepseek-v3", {{"q_lora_rank", nullptr}})).latent.q_lora_rank,
            0);
  EXPECT_EQ(
      transformer(read_edited("deepseek-v3", {{"num_nextn_predict_layers", kRemoved}})).mtp_layers,
      0);
}

TEST(HfConfig, GptOssNotesItsSlidingWindowsAndSinks) {
  const auto hf = read("gpt-oss-120b");
  EXPECT_TRUE(notes_mention(hf,
                            "layer_types, sliding_window: 18 of the 36 layers attend over a "
                            "sliding window of keys"));
  EXPECT_TRUE(notes_mention(hf, "attention sinks"));
  EXPECT_TRUE(notes_mention(hf, "attention_bias = true: biases are not modelled"));
  EXPECT_NE(unused_note(hf).find("experts_per_token"), std::string::npos);
}

// GptOssExperts always carry biases and clamp both halves at swiglu_limit (7.0 when absent):
// read as the experts' bias and clamp; a clamp that is no positive number is refused by name.
TEST(HfConfig, GptOssExpertsHaveBiasesAndAClamp) {
  const auto hf = transformer(read("gpt-oss-120b"));
  ASSERT_TRUE(hf.moe);
  EXPECT_TRUE(hf.moe->expert_bias);
  EXPECT_EQ(hf.moe->activation_clamp, 7.0);
  EXPECT_EQ(unused_note(read("gpt-oss-120b")).find("swiglu_limit"), std::string::npos);
  EXPECT_EQ(transformer(read_edited("gpt-oss-120b", {{"swiglu_limit", 5.5}})).moe->activation_clamp,
            5.5);
  EXPECT_EQ(
      transformer(read_edited("gpt-oss-120b", {{"swiglu_limit", kRemoved}})).moe->activation_clamp,
      7.0);
  EXPECT_FALSE(transformer(read("mixtral-8x7b")).moe->expert_bias);
  EXPECT_EQ(transformer(read("mixtral-8x7b")).moe->activation_clamp, 0.0);
  for (const nlohmann::json& bad : {nlohmann::json(-1.0), nlohmann::json("7"), nlohmann::json(0)}) {
    const std::string error = edit_error("gpt-oss-120b", {{"swiglu_limit", bad}});
    EXPECT_NE(error.find("swiglu_limit"), std::string::npos) << error;
    EXPECT_NE(error.find("expected a positive number (the experts' clamp), got " + bad.dump()),
              std::string::npos)
        << error;
  }
}

// pipetab keeps a model's dense layers as a leading block (dense_layers). Qwen3-MoE's
// decoder_sparse_step = 2 interleaves them (Qwen3MoeDecoderLayer: experts where (layer + 1) %
// step == 0): read, not refused, with the dense layers counted right and a note that names the
// field and says the stages' shares differ. A leading mlp_only_layers block is exact.
TEST(HfConfig, QwenMoeInterleavedDenseLayersAreNoted) {
  const auto every_other = read_edited("qwen3-30b-a3b", {{"decoder_sparse_step", 2}});
  ASSERT_TRUE(transformer(every_other).moe);
  EXPECT_EQ(transformer(every_other).moe->dense_layers, 24);
  EXPECT_EQ(transformer(every_other).moe->dense_ffn_hidden, 6144);
  EXPECT_TRUE(notes_mention(every_other,
                            "c.json: mlp_only_layers, decoder_sparse_step: the model's 24 dense "
                            "layers are interleaved with its expert layers"));

  const auto leading = read_edited("qwen3-30b-a3b", {{"mlp_only_layers", {0, 1}}});
  EXPECT_EQ(transformer(leading).moe->dense_layers, 2);
  EXPECT_FALSE(notes_mention(leading, "interleaved"));

  const auto inside = read_edited("qwen3-30b-a3b", {{"mlp_only_layers", {5}}});
  EXPECT_EQ(transformer(inside).moe->dense_layers, 1);
  EXPECT_TRUE(notes_mention(inside, "interleaved"));

  // Every layer dense: a dense model, said so.
  const auto dense = read_edited("qwen3-30b-a3b", {{"decoder_sparse_step", 100}});
  EXPECT_FALSE(transformer(dense).moe);
  EXPECT_TRUE(notes_mention(dense, "no layer has experts"));

  EXPECT_EQ(edit_error("qwen3-30b-a3b", {{"mlp_only_layers", {48}}}),
            "c.json:18:5: mlp_only_layers[0]: 48 is out of range (expected 0..47)");
}

TEST(HfConfig, RefusesAnUnknownArchitectureByName) {
  const auto message = error_of(R"({"architectures": ["BertForMaskedLM"], "model_type": "bert"})");
  EXPECT_EQ(message.find("c.json:1:20: architectures[0]: 'BertForMaskedLM' is not an "
                         "architecture pipetab reads (it reads LlamaForCausalLM (llama), "),
            0U)
      << message;
  for (const char* name : {"Qwen3MoeForCausalLM (qwen3_moe)", "DeepseekV3ForCausalLM",
                           "GptOssForCausalLM", "MPTForCausalLM (mpt)"}) {
    EXPECT_NE(message.find(name), std::string::npos) << name;
  }
  EXPECT_EQ(error_of("{\n  \"model_type\": \"gpt2\"\n}")
                .find("c.json:2:17: model_type: 'gpt2' is not a model_type pipetab reads"),
            0U);
  EXPECT_EQ(error_of(R"({"architectures": ["LlamaForCausalLM"], "model_type": "qwen2"})"),
            "c.json:1:55: model_type: 'qwen2' does not match architectures[0] = "
            "LlamaForCausalLM (model_type llama)");
  EXPECT_EQ(error_of(R"({"hidden_size": 8})")
                .find("c.json:1:1: architectures, model_type: missing: a config.json names its "
                      "architecture"),
            0U);
}

TEST(HfConfig, RefusesMissingFieldsAndWrongTypesWithTheirPlace) {
  // A missing field: at the object that should hold it, naming the field and what it is.
  EXPECT_EQ(edit_error("llama-3.1-8b", {{"num_hidden_layers", kRemoved}}),
            "c.json:1:1: num_hidden_layers: missing: a LlamaForCausalLM config.json gives the "
            "number of layers");
  EXPECT_EQ(edit_error("qwen3-32b", {{"num_key_value_heads", kRemoved}}),
            "c.json:1:1: num_key_value_heads: missing: a Qwen3ForCausalLM config.json gives the "
            "number of key-value heads");
  EXPECT_EQ(edit_error("qwen3-32b", {{"head_dim", kRemoved}}),
            "c.json:1:1: head_dim: missing: a Qwen3ForCausalLM config.json gives the width of an "
            "attention head");
  // Llama's key-value heads default to the heads (LlamaConfig).
  EXPECT_EQ(transformer(read_edited("llama-3.1-8b", {{"num_key_value_heads", kRemoved}})).kv_heads,
            32);
  // A wrong type, at its value.
  const std::string text =
      "{\n"
      "  \"architectures\": [\"LlamaForCausalLM\"],\n"
      "  \"hidden_size\": \"4096\",\n"
      "  \"num_hidden_layers\": 32\n"
      "}\n";
  EXPECT_EQ(error_of(text), "c.json:3:18: hidden_size: expected a whole number, got a string");
  EXPECT_EQ(edit_error("llama-3.1-8b", {{"num_hidden_layers", 32.5}}),
            "c.json:17:24: num_hidden_layers: expected a whole number, got 32.5");
  EXPECT_EQ(edit_error("llama-3.1-8b", {{"vocab_size", 0}}),
            "c.json:33:17: vocab_size: 0 is out of range (expected 1..1099511627776)");
  EXPECT_EQ(edit_error("llama-3.1-8b", {{"tie_word_embeddings", "no"}}),
            "c.json:29:26: tie_word_embeddings: expected true or false, got a string");
  EXPECT_EQ(edit_error("llama-3.1-8b", {{"attention_dropout", 1.5}}),
            "c.json:6:24: attention_dropout: 1.5 is out of range (expected a probability, 0..1)");
  // The shape rules of a model file.
  EXPECT_EQ(edit_error("llama-3.1-8b", {{"num_key_value_heads", 5}}),
            "c.json:18:26: num_key_value_heads: num_attention_heads = 32 is not a multiple of 5");
  EXPECT_EQ(edit_error("llama-3.1-8b", {{"hidden_size", 4100}}),
            "c.json:10:18: hidden_size: 4100 is not a multiple of num_attention_heads = 32: give "
            "head_dim if the heads' width is not hidden / heads");
  EXPECT_EQ(edit_error("mixtral-8x7b", {{"num_experts_per_tok", 9}}),
            "c.json:15:26: num_experts_per_tok: 9 is out of range (expected 1..8)");
}

TEST(HfConfig, RefusesWhatIsNotAConfigJson) {
  // A TOML model file given as config.json: refused at the first character JSON cannot read.
  EXPECT_EQ(error_of("name = \"llama\"\n").find("c.json:1:2: invalid JSON: "), 0U);
  EXPECT_EQ(error_of("{\n  \"architectures\": [\"LlamaForCausalLM\"],\n}\n")
                .find("c.json:3:1: invalid JSON: "),
            0U);
  EXPECT_EQ(error_of("[1, 2]"),
            "c.json:1:1: expected a JSON object (a Hugging Face config.json), got an array");
  EXPECT_EQ(error_of(R"({"model_type": "llama", "model_type": "qwen2"})"),
            "c.json:1:25: model_type: duplicate key 'model_type'");
  EXPECT_EQ(error_of(std::string(100, '[')).find("c.json:1:65: JSON nested deeper than 64"), 0U);
}

TEST(HfConfig, LoadModelReadsAConfigJsonOrItsFolder) {
  const auto folder = data("llama-3.1-8b").parent_path();
  const auto from_folder = io::load_model(folder.string());
  EXPECT_EQ(from_folder.name, "llama-3.1-8b");
  EXPECT_EQ(transformer(from_folder).layers, 32);
  const auto from_file = io::load_model(data("llama-3.1-8b").string());
  EXPECT_EQ(transformer(from_file).vocab, 128256);
  // A preset's name still names the preset.
  EXPECT_EQ(default_setup(io::load_model("llama3.1-8b"), {}).job.seq_len, 8192);

  const auto empty = fs::temp_directory_path() / "pipetab-hf-config-empty";
  fs::create_directories(empty);
  try {
    (void)io::load_model(empty.string());
    ADD_FAILURE() << "a folder without config.json was read";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--model " + empty.string() +
                  ": a folder is read as a Hugging Face model, and it holds no config.json");
  }
  fs::remove_all(empty);
}

TEST(HfConfig, NameIsNameOrPathElseTheFolder) {
  EXPECT_EQ(read_edited("qwen3-32b", {{"_name_or_path", "Qwen/Qwen3-32B"}}).name, "Qwen/Qwen3-32B");
  EXPECT_EQ(read_edited("qwen3-32b", {{"_name_or_path", "./"}}).name, "c");
  EXPECT_EQ(io::parse_hf_config(text_of(data("qwen3-32b")), "models/q/config.json").name, "q");
}

// The transformers port of MPT (MptForCausalLM) always uses ALiBi; a grouped-query MPT
// (llm-foundry) has kv_n_heads; an MLP that pipetab does not model is refused by name.
TEST(HfConfig, MptVariants) {
  const auto port = read_edited(
      "mpt-7b", {{"architectures", {"MptForCausalLM"}}, {"attn_config", {{"alibi", false}}}});
  EXPECT_FALSE(transformer(port).learned_positions);
  const auto learned = read_edited("mpt-7b", {{"attn_config", {{"alibi", false}}}});
  EXPECT_TRUE(transformer(learned).learned_positions);
  const auto gqa = read_edited(
      "mpt-7b", {{"attn_config", {{"attn_type", "grouped_query_attention"}, {"kv_n_heads", 8}}}});
  EXPECT_EQ(transformer(gqa).kv_heads, 8);
  const auto glu = read_edited("mpt-7b", {{"ffn_config", {{"ffn_type", "mptglu"}}}});
  EXPECT_TRUE(transformer(glu).gated_mlp);
  EXPECT_EQ(edit_error("mpt-7b", {{"ffn_config", {{"ffn_type", "mb_dmoe"}}}}),
            "c.json:26:17: ffn_config.ffn_type: 'mb_dmoe' is not an MLP pipetab reads (it reads "
            "\"mptmlp\" and \"mptglu\")");
  EXPECT_EQ(edit_error("mpt-7b", {{"expansion_ratio", 2.7}}),
            "c.json:24:22: expansion_ratio: 2.7 × d_model = 11059.2 is not a whole MLP width in "
            "1..67108864");
  EXPECT_TRUE(notes_mention(read_edited("mpt-7b", {{"no_bias", false}}), "no_bias = false"));
}

}  // namespace
}  // namespace pipetab
