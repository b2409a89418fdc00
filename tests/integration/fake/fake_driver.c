/* A library named like one of NVIDIA's (libnvidia-fake.so): loading it must trip the shim's
   REMORA_ASSERT_NO_LOCAL_GPU check (tests/integration/local_gpu_check_test.sh). */
int remora_fake_nvidia_driver_marker(void) { return 42; }
