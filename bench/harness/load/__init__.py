"""The load generators: Python (loadgen), open loop in C (openloop + openloop.c), wrk (wrk)."""
