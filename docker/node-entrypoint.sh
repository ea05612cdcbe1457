#!/bin/sh
# A compute node of the compose stack (docker/compose.yaml), or any command in the training image.
#   keys  make the stack's ssh keys once, into /stack-keys (a volume): the workers' client key, one
#         host key the nodes share, the known_hosts and the ssh client config the suite file names.
#         Made at the stack's first start, never baked into an image; kept across down/up.
#   sshd  serve ssh with the host key and authorized key from /stack-keys (read-only here).
#   else  run the command (e.g. `bench train --help`).
set -eu
KEYS=/stack-keys
WORKER_UID=${SCALEWATCH_WORKER_UID:-50000}  # the Airflow image's user, who reads the client key

case "${1:-sshd}" in
keys)
  if [ ! -s "$KEYS/client_key" ]; then
    umask 077
    rm -f "$KEYS/client_key" "$KEYS/client_key.pub" "$KEYS/host_key" "$KEYS/host_key.pub"
    ssh-keygen -q -t ed25519 -N '' -C scalewatch-worker -f "$KEYS/client_key"
    ssh-keygen -q -t ed25519 -N '' -C scalewatch-node -f "$KEYS/host_key"
    umask 022
    cp "$KEYS/client_key.pub" "$KEYS/authorized_keys"
    printf '%s %s\n' "${SCALEWATCH_NODES:-node1,node2}" "$(cut -d' ' -f1,2 "$KEYS/host_key.pub")" > "$KEYS/known_hosts"
    cat > "$KEYS/ssh_config" <<CONF
Host *
  User root
  IdentityFile $KEYS/client_key
  IdentitiesOnly yes
  UserKnownHostsFile $KEYS/known_hosts
  StrictHostKeyChecking yes
CONF
    chown "$WORKER_UID:0" "$KEYS/client_key"
    echo "stack keys made in $KEYS"
  else
    echo "stack keys kept in $KEYS"
  fi
  # The shared volume: the workers (WORKER_UID) write runs and datasets, the nodes' ranks (root) too.
  if [ -d /shared ]; then
    mkdir -p /shared/runs /shared/data
    chown "$WORKER_UID:0" /shared /shared/runs /shared/data
  fi
  ;;
sshd)
  while [ ! -s "$KEYS/authorized_keys" ]; do sleep 1; done
  mkdir -p /run/sshd
  exec /usr/sbin/sshd -D -e -h "$KEYS/host_key" -o AuthorizedKeysFile="$KEYS/authorized_keys" \
    -o PasswordAuthentication=no -o KbdInteractiveAuthentication=no -o PermitRootLogin=prohibit-password
  ;;
*)
  exec "$@"
  ;;
esac
