#!/bin/sh
# A compute node of the compose stack (docker/compose.yaml), or any command in the training image.
#   keys  make the stack's ssh keys once, into two volumes: /stack-keys, what the Airflow workers hold
#         (their client key, the known_hosts and the ssh client config the suite file names), and
#         /node-keys, what the nodes hold (one host key they share, the authorized key). A node never
#         holds the workers' client key: root on one node must not log in to the others with it.
#         Made at the stack's first start, never baked into an image; kept across down/up.
#   sshd  serve ssh with the host key and authorized key from /node-keys (read-only here).
#   else  run the command (e.g. `bench train --help`).
set -eu
KEYS=/stack-keys
NODE_KEYS=/node-keys
WORKER_UID=${SCALEWATCH_WORKER_UID:-50000}  # the Airflow image's user, who reads the client key

case "${1:-sshd}" in
keys)
  # Volumes made before the keys were split: the host key moves to the nodes' volume, out of the workers'.
  if [ -s "$KEYS/host_key" ] && [ ! -s "$NODE_KEYS/host_key" ]; then
    mv "$KEYS/host_key" "$KEYS/host_key.pub" "$NODE_KEYS/"
  fi
  rm -f "$KEYS/host_key" "$KEYS/host_key.pub" "$KEYS/authorized_keys"
  if [ ! -s "$KEYS/client_key" ] || [ ! -s "$NODE_KEYS/host_key" ]; then
    umask 077
    rm -f "$KEYS/client_key" "$KEYS/client_key.pub" "$NODE_KEYS/host_key" "$NODE_KEYS/host_key.pub"
    ssh-keygen -q -t ed25519 -N '' -C scalewatch-worker -f "$KEYS/client_key"
    ssh-keygen -q -t ed25519 -N '' -C scalewatch-node -f "$NODE_KEYS/host_key"
    umask 022
    printf '%s %s\n' "${SCALEWATCH_NODES:-node1,node2}" "$(cut -d' ' -f1,2 "$NODE_KEYS/host_key.pub")" > "$KEYS/known_hosts"
    cat > "$KEYS/ssh_config" <<CONF
Host *
  User root
  IdentityFile $KEYS/client_key
  IdentitiesOnly yes
  UserKnownHostsFile $KEYS/known_hosts
  StrictHostKeyChecking yes
CONF
    chown "$WORKER_UID:0" "$KEYS/client_key"
    echo "stack keys made in $KEYS and $NODE_KEYS"
  else
    echo "stack keys kept in $KEYS and $NODE_KEYS"
  fi
  cp "$KEYS/client_key.pub" "$NODE_KEYS/authorized_keys"
  # The shared volume: the workers (WORKER_UID) write runs and datasets, the nodes' ranks (root) too.
  if [ -d /shared ]; then
    mkdir -p /shared/runs /shared/data
    chown "$WORKER_UID:0" /shared /shared/runs /shared/data
  fi
  ;;
sshd)
  while [ ! -s "$NODE_KEYS/authorized_keys" ]; do sleep 1; done
  mkdir -p /run/sshd
  exec /usr/sbin/sshd -D -e -h "$NODE_KEYS/host_key" -o AuthorizedKeysFile="$NODE_KEYS/authorized_keys" \
    -o PasswordAuthentication=no -o KbdInteractiveAuthentication=no -o PermitRootLogin=prohibit-password
  ;;
*)
  exec "$@"
  ;;
esac
