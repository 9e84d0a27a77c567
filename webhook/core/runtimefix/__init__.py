"""Runtime fixes (SPEC §14): what every accelerator pod needs beside its environment — /dev/shm,
IPC_LOCK for RDMA, and node affinity on the architectures its images are built for."""
