"""Turn the text of a distributed failure into what to check, in the user's language.

Used by ``aura check-dist`` (exceptions inside the ranks) and ``aura launch`` (torchrun's own output,
where rendezvous and port errors appear before any rank starts). Patterns match the messages of
PyTorch's c10d store, torchrun's rendezvous, gloo and NCCL.
"""

from __future__ import annotations

import re

from aura.core.i18n import Messages

M = Messages(
    "dist_diagnose",
    {
        "addr_in_use": (
            "El puerto {port} ya está en uso en el nodo maestro (otro entrenamiento, un torchrun anterior "
            "colgado u otro programa). Elige otro MASTER_PORT y úsalo en TODOS los nodos, p. ej. "
            "'export MASTER_PORT=29501', o busca el proceso con 'ss -ltnp | grep {port}'.",
            "Port {port} is already in use on the master node (another training run, a stale torchrun or "
            "another program). Pick another MASTER_PORT and use it on ALL nodes, e.g. "
            "'export MASTER_PORT=29501', or find the process with 'ss -ltnp | grep {port}'.",
        ),
        "world_mismatch": (
            "Solo se unieron {joined} de los {expected:participante esperado|participantes esperados} (nodos con "
            "torchrun, procesos sin él) antes del tiempo límite. Comprueba que "
            "NNODES y GPUS_PER_NODE (o WORLD_SIZE) sean iguales en todos los nodos, que cada nodo tenga un "
            "NODE_RANK distinto (0..NNODES-1) y que todos se hayan lanzado; después revisa la red (abajo).",
            "Only {joined} of the {expected} expected participants (nodes under torchrun, processes without it) "
            "joined before the timeout. Check that NNODES "
            "and GPUS_PER_NODE (or WORLD_SIZE) are the same on every node, that each node has a different "
            "NODE_RANK (0..NNODES-1) and that all of them were started; then check the network (below).",
        ),
        "rdzv_timeout": (
            "Se agotó el tiempo de la cita (rendezvous): los nodos no llegaron a encontrarse. Comprueba que "
            "todos los nodos se lanzaron con el mismo NNODES, MASTER_ADDR y MASTER_PORT y NODE_RANK distintos.",
            "The rendezvous timed out: the nodes never met. Check that every node was started with the same "
            "NNODES, MASTER_ADDR and MASTER_PORT and distinct NODE_RANKs.",
        ),
        "unreachable": (
            "No se puede conectar con el maestro {addr}. Comprueba MASTER_ADDR (la IP del nodo 0 en la LAN, no "
            "127.0.0.1), que el nodo 0 esté en marcha y que el cortafuegos deje pasar MASTER_PORT.",
            "Cannot connect to the master {addr}. Check MASTER_ADDR (node 0's LAN IP, not 127.0.0.1), that "
            "node 0 is running and that the firewall lets MASTER_PORT through.",
        ),
        "network": (
            "Red: 'nc -l {port}' en el nodo 0 y 'echo hola | nc MASTER_ADDR {port}' en otro nodo deben "
            "conectar; abre el puerto (sudo ufw allow {port}/tcp, o el cortafuegos de Windows con WSL2), usa "
            "la misma subred y, con varias interfaces, fija NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME (p. ej. "
            "eth0) y --local-addr con la IP propia.",
            "Network: 'nc -l {port}' on node 0 and 'echo hello | nc MASTER_ADDR {port}' on another node "
            "must connect; open the port (sudo ufw allow {port}/tcp, or the Windows firewall under WSL2), "
            "use one subnet and, with several interfaces, set NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME (e.g. "
            "eth0) and --local-addr with the node's own IP.",
        ),
        "nccl": (
            "NCCL falló o no está disponible. Prueba '--backend gloo' para confirmar que la red funciona, "
            "revisa 'nvidia-smi' y el controlador, ejecuta con NCCL_DEBUG=INFO y fija NCCL_SOCKET_IFNAME a la "
            "interfaz de la LAN. En WSL2 sin NCCL, 'auto' usa gloo.",
            "NCCL failed or is not available. Try '--backend gloo' to confirm the network works, check "
            "'nvidia-smi' and the driver, run with NCCL_DEBUG=INFO and set NCCL_SOCKET_IFNAME to the LAN "
            "interface. On WSL2 without NCCL, 'auto' uses gloo.",
        ),
        "gloo_iface": (
            "gloo no pudo conectar los procesos entre sí (se conectaron al maestro, pero no entre ellos): "
            "suele ser la interfaz equivocada. Fija GLOO_SOCKET_IFNAME (y NCCL_SOCKET_IFNAME) a la interfaz "
            "de la LAN en cada nodo y pasa --local-addr con su IP.",
            "gloo could not connect the ranks to each other (they reached the master, not each other): "
            "usually the wrong interface. Set GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME) to the LAN "
            "interface on every node and pass --local-addr with its IP.",
        ),
        "peer_died": (
            "Otro proceso terminó o se desconectó a mitad de la comunicación. Busca el primer error en la "
            "salida de los demás rangos (memoria agotada, Ctrl+C, un nodo reiniciado).",
            "Another rank exited or disconnected mid-communication. Look for the first error in the other "
            "ranks' output (out of memory, Ctrl+C, a rebooted node).",
        ),
    },
)

# (compiled pattern, handler returning message lines) in priority order
_RULES: list[tuple[re.Pattern, str]] = [
    (re.compile(r"address already in use|EADDRINUSE|errno: 98|failed to bind|failed to listen", re.I), "addr_in_use"),
    (re.compile(r"(\d+)/(\d+) clients joined", re.I), "world_mismatch"),
    (
        re.compile(
            r"RendezvousTimeoutError|rendezvous.*tim(ed|e) ?out|timed out.*rendezvous|"
            r"waiting for clients|DistStoreError.*timed out|Timed out after \d+ seconds",
            re.I,
        ),
        "rdzv_timeout",
    ),
    (
        re.compile(
            r"connection refused|no route to host|name or service not known|"
            r"failed to connect|connect\(\) timed out|ECONNREFUSED|Temporary failure in name "
            r"resolution|DistNetworkError",
            re.I,
        ),
        "unreachable",
    ),
    (re.compile(r"nccl", re.I), "nccl"),
    # a closed or reset connection after the mesh was built means a peer went away, not a wrong interface
    (
        re.compile(
            r"Connection closed by peer|Connection reset by peer|ECONNRESET|Broken pipe|SIGTERM|"
            r"Socket Timeout",
            re.I,
        ),
        "peer_died",
    ),
    (re.compile(r"gloo.*(connectFullMesh|connect)", re.I), "gloo_iface"),
]
_NETWORK_KEYS = {"world_mismatch", "rdzv_timeout", "unreachable"}


def diagnose(
    text: str, *, addr: str = "MASTER_ADDR", port: int | str = "MASTER_PORT", expected: int | None = None
) -> list[str]:
    """What to check for a failure whose messages are ``text``; empty when nothing is recognised."""
    for pattern, key in _RULES:
        m = pattern.search(text)
        if not m:
            continue
        if key == "world_mismatch":
            lines = [M(key, joined=m.group(1), expected=m.group(2))]
        elif key == "rdzv_timeout" and expected:
            lines = [M("world_mismatch", joined="?", expected=expected)]
        elif key == "addr_in_use":
            lines = [M(key, port=port)]
        elif key == "unreachable":
            lines = [M(key, addr=f"{addr}:{port}")]
        else:
            lines = [M(key)]
        if key in _NETWORK_KEYS:
            lines.append(M("network", port=port))
        return lines
    return []
