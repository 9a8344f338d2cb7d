// A Hugging Face `config.json` (the file transformers' save_pretrained writes beside a model's
// weights) read as a pipetab model, so that `--model path/to/config.json` simulates a model
// without a pipetab model file. Only the architecture is read: the sequence, batch, precision and
// the other job keys are not in a config.json (its max_position_embeddings is the longest context
// the model takes, not a training sequence). docs/simulation.md has the field-by-field mapping.
#pragma once

#include <string>
#include <string_view>

#include "pipetab/model/workload.hpp"

namespace pipetab::io {

/// Reads `text`, a config.json, as the architecture it names: `architectures[0]` (else
/// `model_type`) one of LlamaForCausalLM (llama), Qwen2ForCausalLM (qwen2), Qwen3ForCausalLM
/// (qwen3), Qwen3MoeForCausalLM (qwen3_moe), MixtralForCausalLM (mixtral), DeepseekV3ForCausalLM
/// (deepseek_v3), GptOssForCausalLM (gpt_oss), MPTForCausalLM or MptForCausalLM (mpt). The
/// result sets the TransformerConfig's architecture fields only (layers, widths, heads,
/// vocabulary, MLP kind, positions, dropout, tied embeddings, MLA, experts, MTP); its `defaults`
/// hold flash_attention = true (models in transformers train with fused attention), and its
/// `notes` name every field that was not used, and each one that matters but that pipetab does
/// not model (sliding-window layers, group-limited routing, interleaved dense layers, biases).
/// `name` is the file's `_name_or_path`, else the name of the folder holding it, else its stem.
/// An unknown architecture, a missing field, a wrong type, an out-of-range value or an
/// impossible shape throws ParseError "FILE:LINE:COLUMN: field: what was expected".
ModelConfig parse_hf_config(std::string_view text, const std::string& file);

}  // namespace pipetab::io
