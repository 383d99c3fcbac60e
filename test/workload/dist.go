package workload

import (
	"math"
	"math/rand/v2"
)

// LogNormal is a log-normal length distribution (in tokens), rounded to an
// integer and clamped to [max(Min, 1), Max]. Lengths of human- and
// model-written text are heavy-tailed, which a log-normal captures with two
// numbers.
type LogNormal struct {
	// Median is e^μ, the median before clamping.
	Median float64
	// Sigma is σ of the underlying normal; 0 gives the constant Median.
	// The mean before clamping is Median·e^(σ²/2).
	Sigma float64
	// Min and Max clamp the result; Max <= 0 means no upper bound. Results
	// below 1 become 1.
	Min, Max int
}

// Sample draws one length.
func (d LogNormal) Sample(r *rand.Rand) int {
	v := d.Median
	if d.Sigma > 0 {
		v *= math.Exp(d.Sigma * r.NormFloat64())
	}
	n := int(math.Round(min(v, 1<<30)))
	if n < d.Min {
		n = d.Min
	}
	if d.Max > 0 && n > d.Max {
		n = d.Max
	}
	return max(n, 1)
}

// UniformInt is uniform over the integers [Min, Max] (Max < Min means
// always Min).
type UniformInt struct {
	Min, Max int
}

// Sample draws one value.
func (d UniformInt) Sample(r *rand.Rand) int {
	if d.Max <= d.Min {
		return d.Min
	}
	return d.Min + r.IntN(d.Max-d.Min+1)
}

// Expected is the exact mean.
func (d UniformInt) Expected() float64 {
	if d.Max <= d.Min {
		return float64(d.Min)
	}
	return float64(d.Min+d.Max) / 2
}

// Geometric is a count on 1, 2, ... with P(n) = p(1−p)^(n−1), p = 1/Mean,
// truncated at Max (the tail mass lands on Max). It models "one more turn
// with constant probability", the usual shape of conversation lengths.
type Geometric struct {
	// Mean is the mean before truncation; values <= 1 give always 1.
	Mean float64
	// Max caps the count; <= 0 means no cap.
	Max int
}

// Sample draws one count.
func (d Geometric) Sample(r *rand.Rand) int {
	if d.Mean <= 1 {
		return 1
	}
	q := 1 - 1/d.Mean
	// Inverse CDF: P(N > n) = q^n. 1−Float64() is in (0, 1].
	n := 1 + int(min(math.Floor(math.Log(1-r.Float64())/math.Log(q)), 1<<30))
	if d.Max > 0 && n > d.Max {
		n = d.Max
	}
	return n
}

// Expected is the exact mean after truncation: Σ_{n<Max} q^n = (1−q^Max)/p.
func (d Geometric) Expected() float64 {
	if d.Mean <= 1 {
		return 1
	}
	if d.Max <= 0 {
		return d.Mean
	}
	q := 1 - 1/d.Mean
	return (1 - math.Pow(q, float64(d.Max))) * d.Mean
}
