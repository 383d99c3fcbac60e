package sim

import (
	"fmt"
	"time"
)

// Config describes one simulated replica: the model it claims to serve, its
// KV cache and its vLLM V1 scheduler limits, and the cost model of one
// engine step. Zero fields take the defaults of DefaultConfig. Every
// default is for Llama-3.1-8B-Instruct in bf16 on one 80 GB H100 with vLLM
// V1; the comment on each field gives the source or the assumption.
type Config struct {
	// ID names the replica in responses: the X-Replica-Id HTTP header, the
	// "x-replica-id" gRPC header, SimpleResponse.ServerId and Hostname.
	// Default "replica-0".
	ID string

	// Model is the served model name: the model_name label of every metric
	// and the id in /v1/models. Default "meta-llama/Llama-3.1-8B-Instruct".
	Model string

	// BlockSize is tokens per KV block. Default 16, vLLM's --block-size
	// default on CUDA (design notes §6).
	BlockSize int

	// KVBlocks is the KV capacity in blocks, shared by running sequences and
	// cached prefixes. Default 29000: Llama-3.1-8B stores 128 KiB of KV per
	// token (32 layers × 8 KV heads × 128 dims × K,V × 2 bytes), so a block
	// is 2 MiB; 0.9 × 79.6 GiB minus 15 GiB of weights and a small
	// activation reserve leaves ≈ 56.6 GiB ≈ 29,000 blocks ≈ 464k tokens
	// (§6). vLLM
	// reserves one more block as its null block; it is not modelled.
	// Benchmarks shrink this to put the cache under pressure.
	KVBlocks int

	// MaxRunning caps running sequences (vLLM --max-num-seqs). Default 256,
	// vLLM's long-standing default; V1 raises it to 1024 on GPUs with at
	// least 70 GiB, which only matters above 256 concurrent requests.
	MaxRunning int

	// TokenBudget caps the tokens scheduled in one step, decode tokens
	// included (vLLM --max-num-batched-tokens; V1 always chunks prefill).
	// Default 8192, vLLM V1's value for the OpenAI server on GPUs with at
	// least 70 GiB.
	TokenBudget int

	// PrefillTokensPerSec is the cost of uncached prompt tokens. Default
	// 10,000 tokens/s, the order of magnitude of §6. Assumption: an 8B model
	// costs 2 × 8e9 = 16 GFLOP per token; an H100's 989 dense bf16 TFLOPS
	// would give 60k tokens/s at full utilisation, and 10k allows for
	// realistic MFU and attention over long prompts (conservative).
	PrefillTokensPerSec float64

	// DecodeStepBase is the fixed cost of one engine step. Default 12 ms.
	// Assumption: a step reads all 16 GB of weights, 4.8 ms at the H100's
	// 3.35 TB/s peak; with achievable bandwidth plus sampling, scheduling and
	// detokenisation, vLLM's inter-token latency for an 8B model on an H100
	// at low concurrency is about 7-12 ms; we take the upper end.
	DecodeStepBase time.Duration

	// DecodePerSeq is the extra step cost per decoding sequence. Default
	// 50 µs. Assumption: attention reads each sequence's KV (128 KiB per
	// token); 50 µs is ≈ 1,000 tokens of context at ≈ 2.6 TB/s, a
	// context-independent average. 256 decoding sequences add 12.8 ms.
	DecodePerSeq time.Duration

	// MaxLoRA is the number of LoRA adapter slots (vLLM --max-loras: the
	// adapters one batch may use, each holding a GPU slot). A request
	// names its adapter in the OpenAI body's model field (any name but
	// the base model's) or in the gRPC header x-kvxds-adapter. Default 4
	// (vLLM's own default is 1; multi-LoRA deployments raise it).
	MaxLoRA int

	// AdapterLoad is the engine time one swap-in costs: loading an
	// adapter that holds no slot into one, before the step's forward
	// pass (vLLM's worker activates a batch's adapters synchronously,
	// from its CPU cache or disk). Default 50 ms. Assumption: a rank-16
	// adapter of an 8B model is tens of MB, whose copy to the GPU is
	// milliseconds; the rest is reading and preparing its weights.
	AdapterLoad time.Duration

	// Role is the replica's part in prefill/decode disaggregation. The
	// zero value, RoleBoth, is a replica that prefills and decodes its own
	// requests; RoleDecode prefills remotely when a request names a
	// prefill replica (PrefillerHeader). See Role.
	Role Role

	// TransferPerToken is the simulated time to move one prompt token's KV
	// from a prefill replica to a decode replica (vLLM's NixlConnector
	// reading the prefill replica's blocks over RDMA). Default 4 µs.
	// Assumption: Llama-3.1-8B stores 128 KiB of KV per token; NIXL over
	// one 400 Gb/s NIC, or GPU to GPU within a node, moves a few tens of
	// GB/s once a transfer is under way; 128 KiB at ≈ 32 GB/s is 4 µs, so
	// a 2,000-token prompt moves in 8 ms. Only decode replicas use it.
	TransferPerToken time.Duration

	// TimeScale is simulated seconds per wall second: 1 is real time, 10
	// runs ten times faster. Every latency the replica reports (metrics,
	// x-ttft-seconds, X-Ttft-Seconds) is in simulated seconds. Default 1.
	TimeScale float64
}

// Role is a replica's part in prefill/decode (P/D) disaggregation, as
// llm-d deploys it: the data plane sends a request to a decode replica and
// names the prefill replica it chose in PrefillerHeader; the decode pod's
// routing sidecar first sends the request to that replica with max_tokens
// = 1, then the decode engine pulls the prompt's KV from it and generates.
type Role uint8

const (
	// RoleBoth prefills and decodes every request itself (no P/D); it
	// ignores PrefillerHeader.
	RoleBoth Role = iota
	// RolePrefill serves requests as RoleBoth does; decode replicas call
	// it with max_tokens = 1. Its engine has a KV connector, so it exports
	// vLLM's external prefix-cache counters (never a hit) and the
	// simulator's P/D counters (always zero).
	RolePrefill
	// RoleDecode prefills a request on the replica named in
	// PrefillerHeader, receives its KV and decodes; without the header, or
	// when that replica fails, it prefills locally.
	RoleDecode
)

// String is the role's name: "both", "prefill" or "decode".
func (r Role) String() string {
	switch r {
	case RoleBoth:
		return "both"
	case RolePrefill:
		return "prefill"
	case RoleDecode:
		return "decode"
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// DefaultConfig returns the defaults described on Config.
func DefaultConfig() Config {
	return Config{
		ID:                  "replica-0",
		Model:               "meta-llama/Llama-3.1-8B-Instruct",
		BlockSize:           16,
		KVBlocks:            29000,
		MaxRunning:          256,
		TokenBudget:         8192,
		PrefillTokensPerSec: 10000,
		DecodeStepBase:      12 * time.Millisecond,
		DecodePerSeq:        50 * time.Microsecond,
		MaxLoRA:             4,
		AdapterLoad:         50 * time.Millisecond,
		TransferPerToken:    4 * time.Microsecond,
		TimeScale:           1,
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.ID == "" {
		c.ID = d.ID
	}
	if c.Model == "" {
		c.Model = d.Model
	}
	if c.BlockSize == 0 {
		c.BlockSize = d.BlockSize
	}
	if c.KVBlocks == 0 {
		c.KVBlocks = d.KVBlocks
	}
	if c.MaxRunning == 0 {
		c.MaxRunning = d.MaxRunning
	}
	if c.TokenBudget == 0 {
		c.TokenBudget = d.TokenBudget
	}
	if c.PrefillTokensPerSec == 0 {
		c.PrefillTokensPerSec = d.PrefillTokensPerSec
	}
	if c.DecodeStepBase == 0 {
		c.DecodeStepBase = d.DecodeStepBase
	}
	if c.DecodePerSeq == 0 {
		c.DecodePerSeq = d.DecodePerSeq
	}
	if c.MaxLoRA == 0 {
		c.MaxLoRA = d.MaxLoRA
	}
	if c.AdapterLoad == 0 {
		c.AdapterLoad = d.AdapterLoad
	}
	if c.TransferPerToken == 0 {
		c.TransferPerToken = d.TransferPerToken
	}
	if c.TimeScale == 0 {
		c.TimeScale = d.TimeScale
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.BlockSize < 1:
		return fmt.Errorf("sim: BlockSize %d must be positive", c.BlockSize)
	case c.KVBlocks < 1:
		return fmt.Errorf("sim: KVBlocks %d must be positive", c.KVBlocks)
	case c.MaxRunning < 1:
		return fmt.Errorf("sim: MaxRunning %d must be positive", c.MaxRunning)
	case c.TokenBudget < 1:
		return fmt.Errorf("sim: TokenBudget %d must be positive", c.TokenBudget)
	case !(c.PrefillTokensPerSec > 0):
		return fmt.Errorf("sim: PrefillTokensPerSec %v must be positive", c.PrefillTokensPerSec)
	case c.MaxLoRA < 1:
		return fmt.Errorf("sim: MaxLoRA %d must be positive", c.MaxLoRA)
	case c.DecodeStepBase < 0 || c.DecodePerSeq < 0 || c.AdapterLoad < 0:
		return fmt.Errorf("sim: step costs must not be negative")
	case c.TransferPerToken < 0:
		return fmt.Errorf("sim: TransferPerToken %v must not be negative", c.TransferPerToken)
	case c.Role > RoleDecode:
		return fmt.Errorf("sim: unknown Role %d", c.Role)
	case !(c.TimeScale > 0):
		return fmt.Errorf("sim: TimeScale %v must be positive", c.TimeScale)
	}
	return nil
}

// stepSeconds is the simulated duration of a step that prefills
// prefillTokens uncached tokens and decodes one token for each of decodes
// sequences.
func (c Config) stepSeconds(prefillTokens, decodes int) float64 {
	return c.DecodeStepBase.Seconds() +
		float64(prefillTokens)/c.PrefillTokensPerSec +
		float64(decodes)*c.DecodePerSeq.Seconds()
}
