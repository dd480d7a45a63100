"""Helpers of the verl agent-loop tests: a transformers generation backend behind verl's
server-manager ``generate`` interface, and the agent loop built on it."""

from __future__ import annotations

import torch


class TransformersServer:
    """verl's server-manager ``generate`` interface over a transformers causal LM."""

    def __init__(self, model, tokenizer, seed: int = 0) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.generator_seed = seed
        self.calls = 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        from verl.workers.rollout.replica import TokenOutput

        torch.manual_seed(self.generator_seed + self.calls)
        self.calls += 1
        ids = torch.tensor([prompt_ids])
        out = self.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=float(sampling_params.get("temperature", 1.0)),
            top_k=0,
            max_new_tokens=int(sampling_params.get("max_tokens", 16)),
            return_dict_in_generate=True,
            output_scores=True,
        )
        new = out.sequences[0, ids.shape[1] :]
        scores = self.model.compute_transition_scores(
            out.sequences, out.scores, normalize_logits=True
        )
        eos = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        n = len(new)
        for k, tok in enumerate(new.tolist()):
            if tok == eos:
                n = k + 1
                break
        return TokenOutput(token_ids=new[:n].tolist(), log_probs=scores[0, :n].tolist())


def make_agent_loop(tokenizer, server, response_length=256, max_turns=3):
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    from agentenvs.integrations.verl.agent_loop import AgentenvsAgentLoop

    config = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": 4096,
                    "response_length": response_length,
                    "multi_turn": {"max_assistant_turns": max_turns},
                }
            }
        }
    )
    return AgentenvsAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=None,
        data_config=DictConfigWrap(OmegaConf.create({})),
        hf_model_type="qwen3",
    )
