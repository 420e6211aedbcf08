"""Reading systemd unit files in tests: the parser, the keys every shipped service carries, systemd-analyze."""
import shutil

from strict import cannot_run

REQUIRED_SERVICE = {
    "Type": "notify", "NotifyAccess": "main", "OOMScoreAdjust": "-600", "ManagedOOMPreference": "avoid",
    "MemorySwapMax": "0", "KillMode": "mixed", "Restart": "on-failure",
    # README.md#exit-codes: "the run units set RestartPreventExitStatus=10 11 65 74 75 78"
    "RestartPreventExitStatus": "10 11 65 74 75 78",
    "SyslogLevel": "err", "RuntimeDirectoryMode": "0700", "LimitCORE": "0",
}


def need_systemd_analyze() -> str:
    binary = shutil.which("systemd-analyze")
    if binary is None:
        cannot_run("systemd-analyze not installed")
    return binary


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """section -> key -> values in order (systemd keys may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections
