"""The subnet manager detector: sm_failover, sm_standby_lost, sweep_storm, trap_storm."""
