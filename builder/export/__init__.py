"""ONNX export: hand-built step graphs (onnx.helper) for the ONNX Runtime engine and the TensorRT path.

Modules: `contract` (the graph I/O contract as data: names, shapes, dtypes), `graph` (builder, weights
streamed to the external-data file, save, node counts, staged writes), `attn_base`, `attention`,
`ort_variant` (the two attention variants and the tree mask), `verify` (the `ort` twin's greedy
verification), `llama` (decoder layers from `builder.model.llama`), `qdq` (FP8:
QuantizeLinear / DequantizeLinear to FLOAT8E4M3FN from modelopt's scales), `medusa` (heads fused into the
target), `target` (`export_target`), `eagle` (`export_eagle`), `eagle3` (`export_eagle3`: EAGLE-3's draft graph,
same contract), `lower` (the float32 lowering of a GPU-form
graph for ONNX Runtime), `tensorrt` (the TensorRT form), `artifacts` (files + `ExportResult`).

Forms (`contract.Precision`): the CPU form is float32 throughout; the GPU form computes in the recipe's
model.dtype (bfloat16 / float16: the `act` dtype below) and stores the KV cache as FLOAT8E4M3FN when the
recipe quantizes it (the `kv` dtype: `act` otherwise). FP8 (`fp8=Fp8Spec`) changes no name or shape:
weights are FLOAT8E4M3FN initializers with a DequantizeLinear, activations are Q→DQ'd inside the graph,
and the keys/values are Q→DQ'd before a float32 cache (CPU form) or written as FP8 codes (GPU form with an
FP8 KV cache).
Nothing is imported here, so `import builder.export` stays free of torch and onnx.

I/O CONTRACT — defined once, as data, in `builder.export.contract` (it generates the exporters' graph
inputs and outputs, the ONNX Runtime bindings and the TensorRT optimization profiles; a test checks every
exported graph against it). What each tensor means:

Dims: B batch, T nodes (new rows), Tv verify nodes, P paths, W path width (= D+1), F draft rows, U
tentative draft columns — all dynamic; CAP = max_seq_len at export (fixed); L layers, KV kv-heads,
D head_dim, C hidden, V vocab, H Medusa heads, K top-K (fixed at export).

Target step graph (`export_target`; one graph for prefill and decoding steps)
  Inputs
    tokens          [B, T]     int64  node tokens
    position_ids    [B, T]     int64  absolute positions
    tree_mask       [B, T, T]  bool   node i attends new node j iff true; only j ≤ i may be true
                                      (topological node order), diagonal true
    past_len        [B]        int64  committed KV length of the row; node j's K/V goes to slot past_len + j
    num_nodes       [B]        int64  valid nodes of the row (1..T); nodes ≥ num_nodes are padding: never
                                      written inside [0, past_len + num_nodes) (the `ort` variant does not
                                      write them at all; `standard` writes them beyond, harmless); their
                                      outputs are unspecified
    verify_index    [B, Tv]    int64  the nodes whose logits are computed (LM head only on these) and
                                      verified; verify-node 0 is the verification root. Prefill: the last
                                      prompt position only (Tv = 1, paths [[[0]]]); a step: all nodes
    paths           [B, P, W]  int32  TreeVerify paths over verify-node indices (one tree per row)
    temperature     [B]        f32    rejection-mode graph only
    top_p           [B]        f32    rejection-mode graph only
    uniforms        [B, W]     f32    rejection-mode graph only (draft_probs is a constant 1 in-graph: all
                                      our drafters are deterministic)
    past_key_{l}, past_value_{l}  [B, KV, CAP, D]  kv, l = 0..L-1
  Outputs
    accepted_len    [B]        int32  TreeVerify: tokens emitted (accepted drafts + bonus)
    best_path       [B]        int32  TreeVerify: lowest path index holding the accepted chain
    output_tokens   [B, W]     int32  TreeVerify: accepted tokens, bonus token, -1
    node_argmax     [B, Tv]    int64  the target's greedy token at every verify node (ties: lowest id)
    hidden          [B, T, C]  act    hidden state after the final norm at every node; EAGLE-3 (`target.Features`):
                                      the draft's fc of the residual stream after its aux layers, concatenated
    medusa_topk     [B, H, K]  int64  only with Medusa heads fused in: each head's top-K token ids (ties:
                                      lower id first) at the hidden state of the LAST ACCEPTED node,
                                      verify_index[b, paths[b, best_path[b], accepted_len[b] - 1]]
    present_key_{l}, present_value_{l}  [B, KV, CAP, D]  the caches after writing the new nodes
                                      (post-RoPE keys)
  The canonical model holds a trtspec::TreeVerify node; the ORT-ready twin is
  `plugins.tree_verify.onnx_op.decompose(model)` with dead nodes pruned (the greedy graph's unused
  sampling constants go).

EAGLE draft step graph (`export_eagle`)
  Inputs
    tokens          [B, F]     int64  t[i+1] of each (h[i], t[i+1]) pair
    hidden_in       [B, F, C]  act    h[i]
    position_ids    [B, F]     int64
    past_len        [B]        int64  committed draft-cache length
    write_offset    [B]        int64  tentative slots already used this step; new row i is written at
                                      slot past_len + write_offset + i
    num_new         [B]        int64  valid rows (1..F); the rest are padding (as for the target)
    tree_mask       [B, F, U]  bool   over the tentative region: column u = slot past_len + u; new row i
                                      is column write_offset + i and must attend itself; columns
                                      < write_offset are earlier tentative nodes (attend ancestors only)
    out_rows        [B, R]     int64  the `ort` variant only: the new rows (0..F-1) the outputs are for; the
                                      others still write the caches, but skip o_proj, the MLP and the LM
                                      head (`extend` asks for each row's last pair, `expand` for all)
    past_key_{l}, past_value_{l}  [B, KV, CAP, D]  kv  the draft layers' caches
  Outputs (R rows, out_rows[b, r], with out_rows; else all F)
    hidden_out      [B, F, C]  act    the draft's predicted next hidden state, un-normed (EagleDraft.forward)
    topk_tokens     [B, F, K]  int64  top-K of log_softmax(target LM head(hidden_out)) (ties: lower id)
    topk_logprobs   [B, F, K]  f32    their log-probabilities, descending
    present_key_{l}, present_value_{l}

Attention semantics (both graphs): row i of batch b, at position position_ids[b, i], attends cache slots
[0, past_len[b]) and slot past_len[b] + u wherever tree_mask[b, i, u] (for the target, u = j). RoPE as
`builder.model.llama` (HF rotate-half; Llama-3.1 scaling when configured; cos/sin tables [CAP, D/2]
from the same fp32 inv_freq, so positions must be < CAP).

Engine obligations
  * Bind past_* and present_* to the SAME preallocated buffer (IOBinding, one OrtValue for both): the
    write is then in place for both variants (TensorScatter in place too: measured 2 µs vs 137 µs with
    a 4 MiB copy per write when the buffers differ, and ORT warns).
  * Every row needs write_at + T ≤ CAP (write_at = past_len, or past_len + write_offset for EAGLE) —
    padding rows included — or the write runs past the buffer (ORT rejects it).
  * Cache buffers are of the graph's `kv` dtype (export.json "precision"; FLOAT8E4M3FN: one byte per
    element) and the inputs / outputs of the `act` dtype (float32 for everything ONNX Runtime runs).
  * Cache buffers must hold finite values everywhere (allocate with zeros): the `standard` variant
    attends slots [0, S), S = max over the batch of write_at + num_new, with a boolean mask, and a NaN
    under a masked slot still poisons the softmax · V product.

Variants: `standard` (ONNX opset-24 standard ops: RotaryEmbedding, TensorScatter, Attention,
RMSNormalization, Swish — the graph a TensorRT rewrite starts from) and `ort` (the lean graph ONNX Runtime
runs on the CPU, laid out per layer as ONNX Runtime GenAI's model builder lays a Llama layer out:
SkipSimplifiedLayerNormalization, packed QKV, GroupQueryAttention with the rotary inside and in-place KV at
per-row offsets, the tree as an attention bias, separate gate / up MatMuls, QuickGelu; an If skips the tree
bias and the tree verification for plain steps — in the target graph; the EAGLE draft graph, whose calls are
mostly tree levels, takes the tree bias always; float32 only, head_dim % 16 == 0). See
`builder.export.attention`, `builder.export.ort_variant`, `builder.export.verify`; measured with ORT's
profiler by scripts/profile_step.py (`devtools.bench.profile`), beside ONNX Runtime GenAI's graph.

`hidden` is emitted by both variants although only EAGLE reads it: the host side
(`builder.engines.batched.BatchedTarget`) binds and reads it for every method. It costs no kernel: it is the
final norm's output, which the LM head needs anyway, written straight into the bound buffer.
"""
