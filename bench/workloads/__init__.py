"""Workloads as files: dataset shape, reader, a real model or an emulated accelerator's time, AU bound."""
