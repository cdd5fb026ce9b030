"""Counter health: resets, saturation, error rates, BER and RoCE congestion per device."""
