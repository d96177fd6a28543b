"""A lab of real SSH test hosts on this machine: network namespaces on a private bridge, each with
its own sshd. Used by the integration tests and by ``bisect lab up|down|status``."""

from deploy.lab.lab import HostStatus, LabStatus, lab_down, lab_status, lab_up, restart_sshd
from deploy.lab.model import Lab, LabError, LabHost, load_lab

__all__ = [
    "HostStatus", "Lab", "LabError", "LabHost", "LabStatus", "lab_down", "lab_status", "lab_up",
    "load_lab", "restart_sshd",
]
